"""A diffusion trainer class on Accelerate: each training step accumulates micro-batches drawn from an endless
iterator over the prepared loader, and a sampling loop runs every few thousand steps."""
import torch
from accelerate import Accelerator


def endless(loader):
    while True:
        yield from loader


class DiffusionTrainer:
    def __init__(self, model, loader, steps=1000, accumulate=2, sample_every=1000):
        self.accelerator = Accelerator(mixed_precision="bf16")
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        self.model, self.optimizer, loader = self.accelerator.prepare(self.model, self.optimizer, loader)
        self.batches = endless(loader)
        self.steps, self.accumulate, self.sample_every = steps, accumulate, sample_every
        self.step = 0

    def train(self):
        while self.step < self.steps:
            total = 0.0
            for _ in range(self.accumulate):
                images = next(self.batches)
                with self.accelerator.autocast():
                    loss = self.model(images) / self.accumulate
                    total += loss.item()
                self.accelerator.backward(loss)
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.step += 1
            if self.step % self.sample_every == 0:
                self.sample(4)
            print(f"step {self.step}: loss {total:.4f}")

    @torch.no_grad()
    def sample(self, count):
        noise = torch.randn(count, 3, 32, 32, device=self.accelerator.device)
        for level in reversed(range(10)):
            noise = self.model.denoise(noise, level)
            print(f"level {level}: std {noise.std().item():.3f}")
        return noise
