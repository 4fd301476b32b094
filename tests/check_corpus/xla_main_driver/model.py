"""A tiny language model (its code does not matter to the lint)."""
import torch.nn as nn


class TinyLM(nn.Module):
    def __init__(self, vocab=256, dim=64, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x).relu()
        return self.head(x)
