"""Evaluation helpers of a segmentation trainer: no torch_xla import here, the loaders come from train.py."""

import torch
from tqdm import tqdm


class Evaluator:
    def __init__(self, model, num_classes: int) -> None:
        self.model = model
        self.num_classes = num_classes

    def evaluate(self, dataloader, phase: str = "eval") -> float:
        total, batches = 0.0, 0
        with torch.no_grad():
            for batch in tqdm(dataloader, desc=phase):
                logits = self.model(batch["image"])
                loss = torch.nn.functional.cross_entropy(logits, batch["mask"])
                if self.num_classes == 1:
                    total += loss.item()
                batches += 1
        return total / max(batches, 1)


def smoke_test(model, loader) -> float:
    for batch in loader:
        out = model(batch["image"])
        return float(out.mean().item())
    return 0.0
