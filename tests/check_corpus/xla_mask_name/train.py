"""Token classification on PyTorch/XLA: masks bound to names before indexing."""
import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


def train_epoch(model, loader, optimizer, device, ignore_index=-100):
    model.train()
    device_loader = pl.MpDeviceLoader(loader, device)
    for step, batch in enumerate(device_loader):
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"])
        labels = batch["labels"]
        active = labels != ignore_index
        loss = F.cross_entropy(logits[active], labels[active])
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()


def train_epoch_fixed(model, loader, optimizer, device, ignore_index=-100):
    for step, batch in enumerate(pl.MpDeviceLoader(loader, device)):
        logits = model(batch["input_ids"])
        labels = batch["labels"]
        weights = (labels != ignore_index).float()
        per_token = F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")
        loss = (per_token * weights).sum() / weights.sum().clamp(min=1.0)
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()


def main(model, train_loader, epochs):
    device = torch_xla.device()
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
    for epoch in range(epochs):
        if epoch % 2 == 0:
            train_epoch(model, train_loader, optimizer, device)
        else:
            train_epoch_fixed(model, train_loader, optimizer, device)
