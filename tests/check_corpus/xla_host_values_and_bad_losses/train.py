"""A PyTorch/XLA loop whose step helper hands back host numbers, with a guard for a bad loss."""
import math
import sys

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch import nn


def mean_of(values):
    return sum(values) / len(values)


class Pooler(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.width = width
        self.proj = nn.Linear(width, 10)

    def forward(self, x):
        window = int(torch.round(torch.tensor([self.width / x.shape[-1]])).item())
        return self.proj(F.avg_pool1d(x, window).flatten(1))


def step_and_reduce(model, images, labels, optimizer):
    optimizer.zero_grad()
    logits = model(images)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    xm.optimizer_step(optimizer)
    accuracy = (logits.argmax(-1) == labels).float().mean()
    reduced_loss = xm.mesh_reduce("loss", loss, mean_of)
    reduced_accuracy = xm.mesh_reduce("accuracy", accuracy, mean_of)
    return reduced_loss, reduced_accuracy


def train(model, loader, optimizer):
    history = []
    for step, (images, labels) in enumerate(loader):
        loss, accuracy = step_and_reduce(model=model, images=images, labels=labels, optimizer=optimizer)
        history.append((loss.detach().item(), accuracy.detach().item()))
    return history


def train_with_guard(model, loader, optimizer):
    for step, (images, labels) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        xm.optimizer_step(optimizer)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            print("the loss is {}, stopping".format(loss.item()))
            sys.exit(1)


def main():
    device = xm.xla_device()
    model = Pooler().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4, 64), torch.randint(0, 10, (64,)))
    loader = pl.MpDeviceLoader(torch.utils.data.DataLoader(data, batch_size=8), device)
    train(model, loader, optimizer)
    train_with_guard(model, loader, optimizer)


if __name__ == "__main__":
    main()
