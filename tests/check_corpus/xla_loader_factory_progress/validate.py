"""Validation over several subsets, as a sequence-to-sequence toolkit runs it: a loader made per subset by a helper
that ends the step before it, wrapped by a progress helper, and a summary printed per subset."""
import torch

from loaders import device_batches, with_progress


def validate(model, subsets, criterion):
    summaries = {}
    for subset, batches in subsets.items():
        progress = with_progress(device_batches(batches), prefix=f"valid on {subset}")
        losses = []
        for sources, targets in progress:
            with torch.no_grad():
                loss = criterion(model(sources), targets)
            losses.append(loss.item())
        summaries[subset] = sum(losses) / max(len(losses), 1)
        print(f"{subset}: loss {summaries[subset]:.3f}")
    return summaries


if __name__ == "__main__":
    validate(torch.nn.Linear(4, 4), {"valid": [(torch.randn(2, 4), torch.randn(2, 4))]}, torch.nn.MSELoss())
