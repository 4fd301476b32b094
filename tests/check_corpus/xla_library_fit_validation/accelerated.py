"""The same library's Accelerate flavour: the loaders are prepared elsewhere and each loop calls a method that runs
the model; the loss is read after every batch, in training and in evaluation."""
import torch
from accelerate import Accelerator


class AcceleratedLearner:
    def __init__(self, model, optimizer, train_loader, valid_loader):
        self.accelerator = Accelerator(mixed_precision="bf16")
        self.model, self.optimizer, self.train_loader, self.valid_loader = self.accelerator.prepare(
            model, optimizer, train_loader, valid_loader)

    def forward_batch(self, batch):
        return self.model(**batch).loss

    def train_epoch(self):
        running = []
        for batch in self.train_loader:
            loss = self.forward_batch(batch)
            self.accelerator.backward(loss)
            self.optimizer.step()
            self.optimizer.zero_grad()
            running.append(loss.item())
        return sum(running) / len(running)

    @torch.no_grad()
    def evaluate(self):
        total = torch.zeros((), device=self.accelerator.device)
        for batch in self.valid_loader:
            total += self.forward_batch(batch).detach()
        return total.item() / len(self.valid_loader)
