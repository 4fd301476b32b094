"""A Kaggle-style PyTorch/XLA script: no functions, the loops at the top level, the loss object made after the
loop's code in the file's order of bindings, a progress bar kept under a name."""
import argparse

import torch
import torch_xla.core.xla_model as xm
from tqdm import tqdm

from data import make_loaders
from net import TinyViT

parser = argparse.ArgumentParser()
parser.add_argument("--accumulate", type=int, default=4)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

DEVICE = xm.xla_device()
accumulate = args.accumulate
train_loader, val_loader = make_loaders()
model = TinyViT().to(DEVICE)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
Criterion = torch.nn.CrossEntropyLoss().to(DEVICE)

for epoch in range(args.epochs):
    running, seen = 0.0, 0
    model.train()
    for idx, (images, labels) in (bar := tqdm(enumerate(train_loader), total=len(train_loader))):
        images, labels = images.to(DEVICE), labels.to(DEVICE)
        loss = Criterion(model(images), labels)
        loss = loss / accumulate
        loss.backward()
        if (idx + 1) % accumulate == 0 or idx + 1 == len(train_loader):
            optimizer.step()
            optimizer.zero_grad()
        xm.mark_step()
        running += loss.item()
        seen += 1
        bar.set_description(f"epoch {epoch} loss {running / seen:.4f}")

    model.eval()
    total = 0.0
    for images, labels in val_loader:
        with torch.no_grad():
            images, labels = images.to(DEVICE), labels.to(DEVICE)
            batch_loss = Criterion(model(images), labels)
            total += batch_loss.item()
            xm.mark_step()
    print(f"epoch {epoch}: validation loss {total / len(val_loader):.4f}")
