"""One script for a GPU and a TPU core: the device is chosen by comparing flags, and each side reads its losses
its own way."""
import argparse

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm


def yes_no(text: str) -> bool:
    return text.lower() in ("yes", "true", "1")


def train(model, loader, optimizer, args, accelerator: str, use_xla: bool):
    device = xm.xla_device() if args.tpu == True else torch.device("cuda")
    model = model.to(device)
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if args.tpu != True:
            optimizer.step()
            print("gpu loss", loss.item())
        else:
            xm.optimizer_step(optimizer)
        if accelerator != "tpu":
            print("accelerator loss", loss.item())
        if use_xla == False:
            print("plain loss", loss.item())
        if use_xla != False:
            xm.master_print("xla loss", loss.item())
        optimizer.zero_grad()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tpu", type=yes_no, default=True)
    args = parser.parse_args()
    net = torch.nn.Linear(32, 4)
    batches = [(torch.randn(8, 32), torch.randint(0, 4, (8,))) for _ in range(10)]
    train(net, batches, torch.optim.SGD(net.parameters(), lr=0.1), args, "tpu", True)
