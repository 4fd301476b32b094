"""A PyTorch/XLA TTS-style trainer whose collate function pads with the helpers in padding.py."""

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader

from padding import pad_frames, pad_ids, pad_to_bucket


def collate(batch):
    texts = pad_ids([item["text"] for item in batch])
    mels = pad_frames([item["mel"] for item in batch])
    speakers = pad_ids([item["speaker"] for item in batch], max_len=4)
    phones = pad_to_bucket([item["phones"] for item in batch])
    return torch.from_numpy(texts), mels, torch.from_numpy(speakers), torch.from_numpy(phones)


def summary(batch):
    return pad_ids([item["text"] for item in batch]).shape


def train(model, dataset, optimizer) -> None:
    device = xm.xla_device()
    loader = DataLoader(dataset, batch_size=16, collate_fn=collate)
    for texts, mels, speakers, phones in pl.MpDeviceLoader(loader, device):
        loss = model(texts, mels, speakers, phones).mean()
        loss.backward()
        xm.optimizer_step(optimizer)
