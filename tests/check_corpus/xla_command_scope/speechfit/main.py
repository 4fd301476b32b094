import argparse

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from speechfit.loop import fit


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--log_grad_norm", action="store_true")
    parser.add_argument("--trace_batches", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    args = parse()
    device = xm.xla_device()
    model = torch.nn.Linear(80, 32).to(device)
    batches = [torch.randn(16, 80) for _ in range(64)]
    loader = pl.MpDeviceLoader(batches, device)
    fit(model, loader, args)
