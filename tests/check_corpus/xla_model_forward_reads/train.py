"""Fine-tuning the masked-LM model of models.py on a TPU: batches arrive as dicts through MpDeviceLoader and
the model is called as model(**batch); the step ends with xm.optimizer_step."""
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from models import PatchDropEncoder, TaggedMaskedLM


def train(loader, patch_loader, epochs: int = 3) -> None:
    device = xm.xla_device()
    model = TaggedMaskedLM.from_pretrained("bert-base-uncased").to(device)
    encoder = PatchDropEncoder().to(device)
    params = list(model.parameters()) + list(encoder.parameters())
    optimizer = torch.optim.AdamW(params, lr=5e-5)
    for _ in range(epochs):
        for step, batch in enumerate(pl.MpDeviceLoader(loader, device)):
            optimizer.zero_grad()
            loss = model(**batch).loss
            loss.backward()
            xm.optimizer_step(optimizer)
        for patches, lengths, labels in pl.MpDeviceLoader(patch_loader, device):
            optimizer.zero_grad()
            loss = encoder(patches, lengths, labels)
            loss.backward()
            xm.optimizer_step(optimizer)
