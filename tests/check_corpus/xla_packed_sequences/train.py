"""An LSTM tagger on PyTorch/XLA that packs its padded batches by their lengths."""
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

MAX_LEN = 64


def mask_from_lengths(lengths, device):
    longest = max(lengths)
    return torch.arange(longest, device=device)[None, :] < lengths[:, None]


class Tagger(nn.Module):
    def __init__(self, vocab: int = 1000, width: int = 128, tags: int = 9) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.LSTM(width, width, batch_first=True)
        self.head = nn.Linear(width, tags)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True)
        return self.head(out)


class FixedTagger(Tagger):
    def forward(self, tokens, lengths):
        hidden, _ = self.rnn(self.embed(tokens))
        width = max(hidden.shape[-1], 1)
        return self.head(hidden[..., :width])


def train(model, loader, optimizer, device):
    for tokens, lengths, tags in loader:
        optimizer.zero_grad()
        mask = mask_from_lengths(lengths, device)
        logits = model(tokens, lengths)
        loss = F.cross_entropy(logits[mask], tags[mask])
        loss.backward()
        xm.optimizer_step(optimizer)


def collate(examples):
    longest = max(len(tokens) for tokens, _ in examples)
    assert longest <= MAX_LEN
    tokens = torch.zeros(len(examples), MAX_LEN, dtype=torch.long)
    tags = torch.zeros(len(examples), MAX_LEN, dtype=torch.long)
    for row, (seq, labels) in enumerate(examples):
        tokens[row, : len(seq)] = torch.tensor(seq)
        tags[row, : len(labels)] = torch.tensor(labels)
    lengths = torch.tensor([len(seq) for seq, _ in examples])
    return tokens, lengths, tags


def main():
    device = xm.xla_device()
    model = Tagger().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    examples = [([1, 2, 3], [0, 1, 2]), ([4, 5], [1, 1])] * 32
    loader = pl.MpDeviceLoader(torch.utils.data.DataLoader(examples, batch_size=8, collate_fn=collate), device)
    train(model, loader, optimizer, device)


if __name__ == "__main__":
    main()
