"""A speech-style trainer on PyTorch/XLA: a duration-expanded decoder, a lazily imported xla_model, inverted
and end-of-run guards, and PyTorch/XLA's float16 switch set in the environment."""

import importlib
import os

import torch
import torch.distributed as dist
from torch import nn


class Expander(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, phones, durations):
        frames = phones.repeat_interleave(durations, dim=0)
        doubled = phones.repeat_interleave(2, dim=0)
        if self.training and not torch.jit.is_scripting():
            doubled = doubled * 1.0
        return self.proj(frames), doubled


def train(total_steps: int, loader) -> None:
    xm = importlib.import_module("torch_xla.core.xla_model")
    device = xm.xla_device()
    model = Expander(32).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    for batch_idx, (phones, durations, target) in enumerate(loader):
        phones, durations, target = phones.to(device), durations.to(device), target.to(device)
        frames, _ = model(phones, durations)
        loss = nn.functional.mse_loss(frames.mean(0), target)
        loss.backward()
        xm.optimizer_step(optimizer)
        step += 1
        if batch_idx % 50:
            xm.master_print(f"batch {batch_idx} loss {loss.item():.4f}")
        if batch_idx % 50 == 0 and xm.is_master_ordinal():
            print("loss", loss.item())
        if dist.is_initialized():
            dist.barrier()
        if step >= total_steps:
            print("final loss", loss.item())
            break


if __name__ == "__main__":
    os.environ["XLA_USE_F16"] = "1"
    os.environ.setdefault("XLA_USE_BF16", "1")
