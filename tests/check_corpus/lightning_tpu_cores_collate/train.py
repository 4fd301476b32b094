"""A character-level language model on a Colab TPU with Lightning 1.x: `Trainer(tpu_cores=8)` is its only word
of the TPU."""

import argparse

import pytorch_lightning as pl
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader


class Lines(torch.utils.data.Dataset):
    def __init__(self, path: str) -> None:
        with open(path, encoding="utf-8") as text:
            self.lines = [torch.tensor([min(ord(c), 255) for c in line.strip()]) for line in text if line.strip()]

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.lines[index]


def collate_lines(lines: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    padded = pad_sequence(lines, batch_first=True, padding_value=0)
    return padded[:, :-1], padded[:, 1:]


def collate_fixed(lines: list[torch.Tensor], width: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    padded = torch.zeros(len(lines), width + 1, dtype=torch.long)
    for row, line in enumerate(lines):
        padded[row, : min(len(line), width + 1)] = line[: width + 1]
    return padded[:, :-1], padded[:, 1:]


class CharModel(pl.LightningModule):
    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, width)
        self.rnn = torch.nn.GRU(width, width, batch_first=True)
        self.out = torch.nn.Linear(width, 256)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(tokens))[0])

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = torch.nn.functional.cross_entropy(self(inputs).transpose(1, 2), targets, ignore_index=0)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="lines.txt")
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    collate = collate_fixed if args.fixed else collate_lines
    loader = DataLoader(Lines(args.data), batch_size=64, shuffle=True, collate_fn=collate)
    trainer = pl.Trainer(tpu_cores=args.cores, max_epochs=5)
    trainer.fit(CharModel(), loader)


if __name__ == "__main__":
    main()
