"""A trainer class whose step ends inside a method the loop calls (PyTorch/XLA)."""
import os

import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.out(torch.tanh(self.embed(tokens)))


class Trainer:
    def __init__(self, max_steps, log_every=10):
        self.device = torch_xla.device()
        self.model = TinyLM().to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.loss_fn = nn.CrossEntropyLoss()
        self.max_steps = max_steps
        self.log_every = log_every
        self.global_step = 0

    def batches(self):
        generator = torch.Generator().manual_seed(0)
        while True:
            tokens = torch.randint(0, 64, (8, 17), generator=generator)
            yield tokens[:, :-1], tokens[:, 1:]

    def train_one_step(self, inputs, targets):
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        self.optimizer.zero_grad()
        logits = self.model(inputs)
        loss = self.loss_fn(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        self.optimizer.step()
        xm.mark_step()
        return loss

    def train(self):
        running = 0.0
        for inputs, targets in self.batches():
            loss = self.train_one_step(inputs, targets)
            running += loss.item()
            self.global_step += 1
            if self.global_step % self.log_every == 0:
                print(f"step {self.global_step} loss {running / self.log_every:.3f}", flush=True)
                running = 0.0
            if self.global_step >= self.max_steps:
                break


if __name__ == "__main__":
    Trainer(max_steps=int(os.environ.get("TPUOPS_MAX_STEPS", "200"))).train()
