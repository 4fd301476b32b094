"""Helpers shared by the GPU script and its TPU port: written for CUDA first."""
import torch


def seed_everything(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def clip_each_weight(model, limit):
    norms = []
    for name, weight in model.named_parameters():
        if weight.grad is not None:
            norm = weight.grad.norm(2)
            norms.append(norm.item())
            weight.grad.mul_(torch.clamp(limit / (norm + 1e-6), max=1.0))
    return norms


def peak_memory_mb(device="cuda"):
    return torch.cuda.max_memory_allocated(device) / 2**20
