import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Decoder(nn.Module):
    def __init__(self, vocab=1024, width=256):
        super().__init__()
        self.embed, self.body = nn.Embedding(vocab, width), nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens))[0])

    def next_logits(self, tokens):
        return self(tokens)[:, -1]


class VoiceModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = Decoder()

    def forward(self, tokens, labels):
        logits = self.decoder(tokens)
        return type("Out", (), {"loss": nn.functional.cross_entropy(logits.transpose(1, 2), labels)})()


def voice_batches(batch_size):
    tokens = torch.randint(0, 1024, (2048, 64))
    return DataLoader(TensorDataset(tokens, tokens.roll(-1, 1)), batch_size=batch_size, drop_last=True,
                      collate_fn=lambda rows: {"tokens": torch.stack([r[0] for r in rows]),
                                               "labels": torch.stack([r[1] for r in rows])})
