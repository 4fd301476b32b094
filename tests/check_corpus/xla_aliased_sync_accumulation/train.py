"""A trainer written for CUDA first and ported to PyTorch/XLA: the device's sync is picked once under a name, each
optimizer step accumulates micro-batches in an inner loop, and two optimizers are stepped in a loop of their own."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="xla")
parser.add_argument("--accumulate", type=int, default=4)
parser.add_argument("--iterations", type=int, default=100)
args = parser.parse_args()


def train(model, batches):
    if args.device == "cuda":
        device = torch.device("cuda")
        synchronize = torch.cuda.synchronize
    else:
        import torch_xla.core.xla_model as xm

        device = xm.xla_device()
        synchronize = xm.mark_step
    model = model.to(device)
    matrices = [p for p in model.parameters() if p.ndim == 2]
    vectors = [p for p in model.parameters() if p.ndim != 2]
    optimizers = [torch.optim.SGD(matrices, lr=0.02, momentum=0.9), torch.optim.AdamW(vectors, lr=3e-4)]
    smooth = 0.0
    step = 0
    while step < args.iterations:
        started = time.time()
        for _ in range(args.accumulate):
            inputs, targets = next(batches)
            loss = model(inputs.to(device), targets.to(device)) / args.accumulate
            loss.backward()
            synchronize()
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
        synchronize()
        smooth = 0.9 * smooth + 0.1 * loss.item()
        print(f"step {step}: loss {smooth / (1 - 0.9 ** (step + 1)):.4f}, {time.time() - started:.2f}s")
        step += 1
