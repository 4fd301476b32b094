"""A class-conditional denoiser on PyTorch/XLA: every test here but two is on Python values."""
import argparse

import torch
import torch.nn as nn
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from tqdm import tqdm

from megatron_like import layout


class ClassDropper(nn.Module):
    def __init__(self, classes: int, width: int, drop: float):
        super().__init__()
        self.table = nn.Embedding(classes + 1, width)
        self.classes = classes
        self.drop = drop

    def forward(self, labels, training, forced=None):
        dropping = self.drop > 0
        if (training and dropping) or (forced is not None):
            keep = torch.rand(labels.shape[0], device=labels.device) >= self.drop
            labels = torch.where(keep, labels, self.classes)
        return self.table(labels)


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.labels = ClassDropper(10, 32, 0.1)
        self.body = nn.Linear(32, 32)

    def forward(self, x, labels, variant=None):
        if variant == 2:
            x = x * 0.5
        h = self.body(x + self.labels(labels, self.training))
        if torch.isnan(h).any():
            h = torch.zeros_like(h)
        return h


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dump-batches", action="store_true")
    args = parser.parse_args()
    device = xm.xla_device()
    model = Denoiser().to(device)
    if args.dump_batches:
        for batch in pl.MpDeviceLoader(torch.utils.data.DataLoader(torch.randn(64, 32), batch_size=8), device):
            out = model(batch, torch.zeros(8, dtype=torch.long, device=device))
            print(out.cpu().numpy())
            xm.mark_step()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rank = xm.get_ordinal()
    ticks = tqdm(range(1000)) if rank == 0 else range(1000)
    for tick in ticks:
        x = torch.randn(8, 32, device=device)
        labels = torch.randint(0, 10, (8,), device=device)
        loss = (model(x, labels) - x).pow(2).mean()
        if layout.get_context_parallel_size() > 1:
            loss = loss / 2
        if labels.device.type == "cpu":
            print("labels", labels.numpy())
        loss.backward()
        xm.optimizer_step(opt)
        xm.rendezvous(f"tick_{tick}")
        xm.master_print(f"loss {loss:.4f}")


if __name__ == "__main__":
    main()
