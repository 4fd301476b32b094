"""A small value network and the agent that fits it: written for any device, it never names one itself."""
import torch
from torch import nn

from data import batches


class ValueNet(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(42, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, boards):
        return self.body(boards).squeeze(-1)


class Agent:
    def __init__(self, name, device, lr):
        self.name = name
        self.device = device
        self.model = ValueNet().to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.train_set, self.held_out = batches(4096), batches(512)

    def fit_batch(self, boards, values):
        self.optimizer.zero_grad()
        loss = nn.functional.mse_loss(self.model(boards), values)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def fit(self, epochs):
        for epoch in range(epochs):
            total = 0.0
            for boards, values in self.train_set:
                total += self.fit_batch(boards.to(self.device), values.to(self.device))
            print(f"{self.name} epoch {epoch}: loss {total / len(self.train_set):.4f}")
