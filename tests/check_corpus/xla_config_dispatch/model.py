"""The model and the data every loop shares."""
import torch
from torch import nn


def build_model():
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


def build_loader(config):
    features = torch.randn(config.batch_size * 8, 16)
    labels = torch.randint(0, 4, (config.batch_size * 8,))
    dataset = torch.utils.data.TensorDataset(features, labels)
    return torch.utils.data.DataLoader(dataset, batch_size=config.batch_size, drop_last=True)
