import torch


class Batches:
    """Random token and tag batches on the host, made ahead of training."""

    def __init__(self, seed, batch, length):
        self.source = torch.Generator().manual_seed(seed)
        self.batch, self.length = batch, length

    def generate(self, count):
        return [(torch.randint(0, 512, (self.batch, self.length), generator=self.source),
                 torch.randint(0, 9, (self.batch, self.length), generator=self.source)) for _ in range(count)]
