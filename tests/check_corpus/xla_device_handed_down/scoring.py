"""Held-out scoring, shared with the GPU scripts."""
import torch


def score_model(model, loader, device):
    right, seen = [], 0
    with torch.no_grad():
        for boards, values in loader:
            guesses = model(boards.to(device))
            right.extend((guesses.sign() == values.to(device).sign()).cpu().numpy())
            seen += len(values)
    return sum(right) / max(seen, 1)
