"""Mixed precision choices on PyTorch/XLA: where float16 becomes the compute dtype and where it does not."""
import argparse

import torch
import torch_xla
import torch_xla.core.xla_model as xm

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def build(args):
    device = torch_xla.device()
    model = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, batch_first=True).to(device)
    if args.precision == "fp16":
        model = model.half()
    return model, device


def train(args):
    model, device = build(args)
    dtype = DTYPES[args.precision]
    use_scaler = dtype == torch.float16
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(args.steps):
        x = torch.randn(8, 32, 64, device=device)
        with torch.autocast("xla", dtype=torch.float16):
            out = model(x)
            loss = out.pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        xm.mark_step()
    return use_scaler


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--steps", type=int, default=100)
    train(parser.parse_args())
