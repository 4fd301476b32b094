"""A small speech model trained on one TPU core: checks in its forward that look at tensors but read nothing
from the device, next to two that do."""
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
from torch import nn


class Quantizer(nn.Module):
    def __init__(self, width: int, books: int = 4) -> None:
        super().__init__()
        self.books = books
        self.codebooks = nn.ModuleList(nn.Linear(width, width) for _ in range(books))

    def forward(self, frames, books=None):
        books = books if books else self.books
        for codebook in self.codebooks[:books]:
            frames = frames + codebook(frames)
        return frames


class Decoder(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.inner = nn.Linear(width, width)
        self.speaker = nn.Linear(16, width)
        self.quantizer = Quantizer(width)

    def forward(self, frames, speaker=None, extras=None):
        assert frames.ndimension() == 3, "frames are (batch, time, width)"
        if speaker != None:
            frames = frames + self.speaker(speaker).unsqueeze(1)
        hidden = self.inner(self.quantizer(frames))
        if hidden.dtype == torch.float16 and torch.isinf(hidden).any():
            hidden = hidden.clamp(-6e4, 6e4)
        if extras["aux"]:
            hidden = hidden + extras["aux"][0]
        return hidden


def adversarial_loss(real, fake, optimizer_idx, global_step):
    if optimizer_idx == 0:
        return F.softplus(-fake).mean()
    if global_step < 1000:
        return F.softplus(fake).mean()
    return F.softplus(fake).mean() + F.softplus(-real).mean()


def train(loader, kind: str = "l1"):
    device = xm.xla_device()
    model = Decoder().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    for step, (frames, target, speaker) in enumerate(loader):
        frames, target, speaker = frames.to(device), target.to(device), speaker.to(device)
        output = model(frames, speaker, {"aux": []})
        if kind.startswith("l1"):
            loss = F.l1_loss(output, target)
        else:
            loss = F.mse_loss(output, target)
        loss = loss + adversarial_loss(target, output, 0, step)
        if torch.isnan(loss):
            raise FloatingPointError(f"loss is NaN at step {step}")
        optimizer.zero_grad()
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.master_print("loss", loss.item())


if __name__ == "__main__":
    batches = [(torch.randn(4, 50, 64), torch.randn(4, 50, 64), torch.randn(4, 16)) for _ in range(8)]
    train(batches)
