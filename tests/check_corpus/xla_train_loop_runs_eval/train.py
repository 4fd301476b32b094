"""A PyTorch/XLA classifier with its own optimizer and a gated head; the training loop evaluates every few
hundred steps from inside itself."""
import evaluate
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch import nn
from torch.optim import Optimizer

EVAL_EVERY = 500
REPORT_EVERY = 10


class SignDescent(Optimizer):
    def __init__(self, params, lr: float = 1e-4) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = p.grad.sign()
                if torch.isnan(update).any():
                    continue
                p.add_(update, alpha=-group["lr"])


class GatedHead(nn.Module):
    def __init__(self, width: int = 64, classes: int = 2) -> None:
        super().__init__()
        self.gate = nn.Linear(width, 1)
        self.out = nn.Linear(width, classes)
        self.last = {}

    def gate_of(self, features):
        return torch.sigmoid(self.gate(features))

    def forward(self, features):
        gate = self.gate_of(features)
        self.last = {"gate": float(gate.detach().mean())}
        return self.out(features * gate)


class WarmLoss(nn.Module):
    def forward(self, logits, labels, warm_epoch, epoch):
        loss = F.cross_entropy(logits, labels)
        if epoch > warm_epoch:
            loss = loss + 0.1 * logits.pow(2).mean()
        return loss


def train(model, train_loader, val_loader, device, epochs: int = 3):
    optimizer = SignDescent(model.parameters())
    criterion = WarmLoss()
    metric = evaluate.load("accuracy")
    losses = torch.zeros(REPORT_EVERY, device=device)
    step = 0
    for epoch in range(epochs):
        model.train()
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(model(features), labels, 1, epoch)
            loss.backward()
            xm.optimizer_step(optimizer)
            slot = step % REPORT_EVERY
            losses[slot] = loss.detach()
            print(f"step {step} loss {loss.item():.4f}")
            if slot == REPORT_EVERY - 1:
                xm.master_print(f"mean loss {losses.mean().item():.4f}")
            if step % EVAL_EVERY == 0:
                model.eval()
                with torch.no_grad():
                    for val_features, val_labels in pl.MpDeviceLoader(val_loader, device):
                        logits = model(val_features)
                        metric.add_batch(predictions=logits.argmax(-1), references=val_labels)
                model.train()
            step += 1
    return metric.compute()
