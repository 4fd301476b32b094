"""A PyTorch/XLA model that splices answers into prompts at each example's own length."""
import random

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch import nn

WINDOW = 16


class Splicer(nn.Module):
    def __init__(self, vocab: int = 100, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, prompts, prompt_mask, answers):
        lengths = prompt_mask.sum(dim=1)
        rows = []
        for i in range(prompts.shape[0]):
            n = lengths[i].item()
            rows.append(torch.cat([prompts[i][:n], answers[i], prompts[i][n:]]))
        spliced = self.embed(torch.stack(rows))
        start = prompts.shape[1] - WINDOW
        return self.head(spliced[:, start:start + WINDOW])


def train(model, loader, optimizer):
    for prompts, prompt_mask, answers, labels in loader:
        optimizer.zero_grad()
        logits = model(prompts, prompt_mask, answers)
        loss = F.cross_entropy(logits.flatten(0, 1), labels[:, -WINDOW:].flatten())
        loss.backward()
        xm.optimizer_step(optimizer)
        crops(logits.detach())


def crops(features, width: int = 8):
    picked = []
    for row in range(features.shape[0]):
        start = random.randint(0, features.shape[1] - width)
        picked.append(features[row, start:start + width])
    return torch.stack(picked)


def main():
    device = xm.xla_device()
    model = Splicer().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randint(0, 100, (32, 24)), torch.ones(32, 24, dtype=torch.long),
                                          torch.randint(0, 100, (32, 8)), torch.randint(0, 100, (32, 32)))
    train(model, pl.MpDeviceLoader(torch.utils.data.DataLoader(data, batch_size=8), device), optimizer)


if __name__ == "__main__":
    main()
