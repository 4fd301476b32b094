import torch

from trainer import DiffusionTrainer

images = torch.utils.data.TensorDataset(torch.randn(64, 3, 32, 32))
DiffusionTrainer(torch.nn.Identity(), torch.utils.data.DataLoader(images, batch_size=8)).train()
