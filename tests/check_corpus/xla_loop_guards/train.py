"""A classifier trainer that runs on a TPU with PyTorch/XLA or on a GPU: the loop's guards decide what is read
from the device and how often. Logging every 100 steps is cheap; gathering every batch's logits to the CPU, and
formatting a running loss into the progress bar at every optimizer step, wait for the TPU each time."""
import torch
import torch.nn.functional as F
from tqdm import tqdm

try:
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    use_xla = True
except ImportError:
    use_xla = False


def train(model, loader, optimizer, grad_accum_steps: int = 4) -> torch.Tensor:
    device = xm.xla_device() if use_xla else torch.device("cuda")
    model.to(device)
    if use_xla:
        loader = pl.MpDeviceLoader(loader, device)
    bar = tqdm(total=len(loader))
    preds = None
    total = 0.0
    running = torch.zeros((), device=device)
    iterator = enumerate(loader)
    for step, batch in iterator:
        logits = model(batch["pixels"])
        loss = F.cross_entropy(logits, batch["labels"]) / grad_accum_steps
        loss.backward()
        running += loss.detach()
        should_log = step % 100 == 0
        if should_log:
            print(f"step {step}: loss {loss.item():.4f}")
        if preds is None:
            preds = logits.cpu()
        else:
            preds = torch.cat([preds, logits.cpu()])
        if use_xla:
            xm.mark_step()
        else:
            total += loss.item()
        if (step + 1) % grad_accum_steps == 0:
            if use_xla:
                xm.optimizer_step(optimizer)
            else:
                optimizer.step()
            optimizer.zero_grad()
            bar.set_postfix(loss=f"{running:.3f}")
            bar.update(grad_accum_steps)
    return preds
