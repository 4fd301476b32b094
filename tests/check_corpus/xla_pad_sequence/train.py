"""A PyTorch/XLA sentence classifier whose batches are padded with pad_sequence, to the longest sentence of each
batch: one shape, so one compilation, per distinct longest length. The model pads again inside its forward, per
example, and a second collate function shows the fix: pad_sequence, then F.pad up to a fixed length."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

MAX_TOKENS = 256


def collate_longest(examples):
    ids = [torch.tensor(e["ids"]) for e in examples]
    labels = torch.tensor([e["label"] for e in examples])
    return torch.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=0), labels


def collate_fixed(examples):
    ids = pad_sequence([torch.tensor(e["ids"][:MAX_TOKENS]) for e in examples], batch_first=True)
    ids = F.pad(ids, (0, MAX_TOKENS - ids.shape[1]))
    return ids, torch.tensor([e["label"] for e in examples])


class SpanPooler(nn.Module):
    def __init__(self, vocab: int = 32000, dim: int = 256, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, ids, spans):
        hidden = self.embed(ids)
        pieces = [hidden[i, start:end] for i, (start, end) in enumerate(spans)]
        pooled = pad_sequence(pieces, batch_first=True).mean(dim=1)
        return self.out(pooled)


def train(dataset, spans, fixed: bool = False, epochs: int = 2) -> None:
    device = xm.xla_device()
    model = SpanPooler().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(dataset, batch_size=32, collate_fn=collate_fixed if fixed else collate_longest)
    for _ in range(epochs):
        for ids, labels in pl.MpDeviceLoader(loader, device):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(ids, spans), labels)
            loss.backward()
            xm.optimizer_step(optimizer)
