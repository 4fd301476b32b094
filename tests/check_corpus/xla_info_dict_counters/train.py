"""A speech-recognition style trainer ported to PyTorch/XLA: its helpers keep the step's state in one dict, the
loss (a device tensor) next to plain Python counters (batch index, accumulation steps, the log interval). The
counters are read freely; the loss is read with .item() every step, which waits for the TPU each time."""
import torch
import torch.nn as nn
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from helpers import make_info, record_loss

device = xm.xla_device()


class TinyEncoder(nn.Module):
    def __init__(self, feats: int = 80, hidden: int = 256, vocab: int = 500) -> None:
        super().__init__()
        self.proj = nn.Linear(feats, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, speech, targets):
        logits = self.head(torch.relu(self.proj(speech)))
        return nn.functional.cross_entropy(logits.transpose(1, 2), targets)


def run_epoch(model, optimizer, loader, info):
    model.train()
    for batch_idx, (speech, targets) in enumerate(loader):
        info["batch_idx"] = batch_idx
        loss = model(speech, targets) / info["accum_grad"]
        loss.backward()
        record_loss(info, loss)
        if (info["batch_idx"] + 1) % info["accum_grad"] == 0:
            xm.optimizer_step(optimizer)
            optimizer.zero_grad()
        print("step", batch_idx, "loss", info["loss"].item())
        if info["save_every"] > 0 and batch_idx % info["save_every"] == 0:
            xm.save(model.state_dict(), f"ckpt_{batch_idx}.pt")


def main(loader) -> None:
    model = TinyEncoder().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    info = make_info(accum_grad=4, log_interval=50, save_every=1000)
    for _epoch in range(10):
        run_epoch(model, optimizer, pl.MpDeviceLoader(loader, device), info)
