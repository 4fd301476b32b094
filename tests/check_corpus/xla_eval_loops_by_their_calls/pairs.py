import torch
from torch.utils.data import DataLoader, TensorDataset


def loaders(batch_size):
    clips, captions = torch.randn(2048, 1, 4000), torch.randint(0, 8000, (2048, 24))
    train = TensorDataset(clips[:1792], captions[:1792])
    held_out = TensorDataset(clips[1792:], captions[1792:])
    return (DataLoader(train, batch_size=batch_size, shuffle=True, drop_last=True),
            DataLoader(held_out, batch_size=batch_size, drop_last=True))
