import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import clip_each_weight, seed_everything

seed_everything(0)
device = xm.xla_device()
model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(8192, 128), torch.randint(0, 10, (8192,)))
for epoch in range(4):
    for x, y in pl.MpDeviceLoader(DataLoader(data, batch_size=64, drop_last=True), device):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        clip_each_weight(model, 1.0)
        xm.optimizer_step(optimizer)
    xm.master_print(f"epoch {epoch} done")
