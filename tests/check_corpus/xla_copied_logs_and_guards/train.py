"""A PyTorch/XLA language-model trainer that logs values it has already copied to the host, and a few it has not."""
import logging

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

log = logging.getLogger(__name__)


def clip(parameters, limit, device):
    norm = torch.nn.utils.clip_grad_norm_(parameters, limit)
    if not torch.is_tensor(norm):
        norm = torch.tensor(float(norm), device=device)
    return norm


def summarize(parts):
    table = {}
    for name, value in parts.items():
        key = f"train/{name}"
        table[key] = value.item() if torch.is_tensor(value) else value
    return table


def train(model, loader, optimizer, device, writer):
    model.train()
    parts = {}
    for step, (tokens, targets) in enumerate(pl.MpDeviceLoader(loader, device)):
        optimizer.zero_grad()
        logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        norm = clip(model.parameters(), 1.0, device)
        xm.optimizer_step(optimizer)
        parts["loss"] = loss.detach()
        if step < 3:
            log.info(f"warm-up step {step}: loss {loss.item():.3f}")
        row = summarize(parts)
        writer.write(row)
        shown = {k: v.mean().item() for k, v in parts.items()}
        writer.log_metrics(shown)
        loss = loss.item()
        log.info("step {} loss {:.3f}".format(step, loss))
        log.info(f"grad norm {norm:.2f}")
