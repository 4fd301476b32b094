"""Utterances of log-mel frames and their token ids, batched by a collate function that pads each batch by hand."""
import torch
from torch.utils.data import DataLoader, Dataset

PAD_ID = 0


class Utterances(Dataset):
    def __init__(self, count: int, mels: int = 80) -> None:
        generator = torch.Generator().manual_seed(0)
        self.items = [(torch.randn(int(torch.randint(200, 1600, (1,), generator=generator)), mels),
                       torch.randint(1, 64, (int(torch.randint(10, 90, (1,), generator=generator)),)))
                      for _ in range(count)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def pad_utterances(batch):
    frames_of = lambda item: item[0].size(0)  # noqa: E731
    longest_frames = max(batch, key=frames_of)[0]
    longest_tokens = max(len(tokens) for _, tokens in batch)
    features = torch.FloatTensor(len(batch), longest_frames.size(0), longest_frames.size(1)).zero_()
    targets = torch.LongTensor(len(batch), longest_tokens).fill_(PAD_ID)
    for row, (frames, tokens) in enumerate(batch):
        features[row, : frames.size(0)] = frames
        targets[row, : len(tokens)] = tokens
    lengths = torch.tensor([frames.size(0) for frames, _ in batch])
    return features, targets, lengths


def utterance_loader(count: int, batch_size: int) -> DataLoader:
    return DataLoader(Utterances(count), batch_size=batch_size, shuffle=True, collate_fn=pad_utterances)
