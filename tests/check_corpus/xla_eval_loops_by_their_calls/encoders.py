from torch import nn


class ClipEncoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(1, 32, 9, stride=4), nn.GELU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                                 nn.Linear(32, dim))

    def forward(self, clips):
        return nn.functional.normalize(self.net(clips), dim=-1)


class CaptionEncoder(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, dim)

    def forward(self, captions):
        return nn.functional.normalize(self.embed(captions), dim=-1)
