"""A token tagger on one TPU core: labels of padding are -100 and must not count in the loss."""

import numpy as np
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

IGNORE = -100
TAGS = 9


class SkipPadding(torch.nn.Module):
    """Cross-entropy over the labelled tokens only."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labelled = labels != IGNORE
        labels = labels[labelled]
        if len(labels) == 0:
            return logits.sum() * 0.0
        return F.cross_entropy(logits[labelled], labels)


class Tagger(torch.nn.Module):
    def __init__(self, vocab: int = 1000, width: int = 64) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.out = torch.nn.Linear(width, TAGS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(tokens))


def sentences(count: int = 256, length: int = 48) -> DataLoader:
    tokens = torch.randint(1, 1000, (count, length))
    labels = torch.randint(0, TAGS, (count, length))
    labels[:, 40:] = IGNORE
    return DataLoader(TensorDataset(tokens, labels), batch_size=16, drop_last=True)


def train() -> None:
    device = xm.xla_device()
    model = Tagger().to(device)
    criterion = SkipPadding()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    skipped_rows = np.array([3, 7])
    for tokens, labels in pl.MpDeviceLoader(sentences(), device):
        if tokens.size(0) < 2:
            continue
        optimizer.zero_grad()
        logits = model(tokens).view(-1, TAGS)
        flat = labels.view(-1)
        active = torch.nonzero(flat != IGNORE).squeeze(-1)
        if active.numel() == 0:
            continue
        loss = criterion(logits[active], flat[active])
        loss.backward()
        xm.optimizer_step(optimizer)
        order = torch.argsort(flat)
        ranked = flat[order]
        kept = np.nonzero(skipped_rows > 4)[0]
        if len(kept) == 0:
            xm.master_print("no rows skipped")


if __name__ == "__main__":
    train()
