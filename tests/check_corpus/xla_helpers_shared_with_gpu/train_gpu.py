import torch
from torch import nn

from helpers import clip_each_weight, peak_memory_mb, seed_everything

seed_everything(0)
model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 10)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1000):
    x, y = torch.randn(64, 128, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    clip_each_weight(model, 1.0)
    optimizer.step()
print(f"peak memory {peak_memory_mb():.0f} MB")
