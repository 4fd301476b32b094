"""One training step for GPUs and TPU cores, switched by a setting that names XLA."""
import argparse

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

import runtime


def train_step(model, images, labels, optimizer, scaler):
    optimizer.zero_grad()
    if not runtime.XLA_CFG["is_xla"] and scaler is not None:
        with torch.autocast("cuda"):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        print("scaled loss", loss.item())
    else:
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
    xm.optimizer_step(optimizer)
    if not runtime.XLA_CFG["is_xla"]:
        print("loss", loss.item())
    else:
        print("loss on the TPU", loss.item())
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--use_tpu", action="store_true")
    config = parser.parse_args()
    runtime.XLA_CFG["is_xla"] = config.use_tpu
    device = xm.xla_device()
    model = torch.nn.Linear(16, 4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    loader = pl.MpDeviceLoader(torch.utils.data.DataLoader(data, batch_size=8), device)
    scaler = torch.cuda.amp.GradScaler() if torch.cuda.is_available() else None
    for images, labels in loader:
        train_step(model, images, labels, optimizer, scaler)


if __name__ == "__main__":
    main()
