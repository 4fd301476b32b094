"""Training and evaluation loops of a BERT-style pretrainer; no torch_xla import here, the device comes from
device.py."""

import torch
from tqdm import tqdm

from device import get_device


class Runner:
    def __init__(self, model, data, optimizer, total_steps: int) -> None:
        self.device = get_device()
        self.model, self.data, self.optimizer, self.total_steps = model, data, optimizer, total_steps

    def train(self) -> None:
        model = self.model.to(self.device)
        step = 0
        bar = tqdm(self.data)
        for batch in bar:
            batch = [t.to(self.device) for t in batch]
            self.optimizer.zero_grad()
            loss = masked_lm_loss(model, batch, step)
            loss.backward()
            self.optimizer.step()
            step += 1
            bar.set_description("loss %.3f" % loss.detach())
            if step > self.total_steps:
                print("stopped at loss %.3f" % loss.detach())
                return

    def evaluate(self, score) -> list[float]:
        model = self.model.to(self.device)
        accuracies = []
        for epoch in range(3):
            accuracies.append(score(model, self.data, epoch))
        return accuracies


def masked_lm_loss(model, batch, step):
    tokens, labels = batch
    logits = model(tokens)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
