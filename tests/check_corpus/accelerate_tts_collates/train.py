"""A text-to-speech model trained with Accelerate: two collate functions pad the batch by hand to its longest
example, a third to a fixed length."""
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader


def collate_mels(batch):
    mels = [item["mel"] for item in batch]
    mel_lengths = torch.LongTensor([mel.shape[-1] for mel in mels])
    longest = mel_lengths.amax()
    padded = []
    for mel in mels:
        gap = (0, longest - mel.size(-1))
        padded.append(F.pad(mel, gap, value=0.0))
    return torch.stack(padded), mel_lengths


class PhonemeCollater:
    def __init__(self, fixed_frames: int = 0) -> None:
        self.fixed_frames = fixed_frames

    def __call__(self, batch):
        size = len(batch)
        most_phonemes = max([item["phonemes"].shape[0] for item in batch])
        phonemes = torch.zeros((size, most_phonemes)).long()
        for row, item in enumerate(batch):
            phonemes[row, : item["phonemes"].shape[0]] = item["phonemes"]
        return phonemes


def collate_fixed(batch, frames: int = 400):
    mels = torch.zeros((len(batch), 80, frames))
    for row, item in enumerate(batch):
        mels[row, :, : item["mel"].shape[-1]] = item["mel"][:, :frames]
    return mels


def train(model, dataset, steps: int = 1000):
    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(dataset, batch_size=16, collate_fn=collate_mels)
    text_loader = DataLoader(dataset, batch_size=16, collate_fn=PhonemeCollater())
    fixed_loader = DataLoader(dataset, batch_size=16, collate_fn=collate_fixed)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for (mels, lengths), phonemes, fixed in zip(loader, text_loader, fixed_loader):
        loss = model(mels, lengths, phonemes, fixed)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    train(build_model(), build_dataset())
