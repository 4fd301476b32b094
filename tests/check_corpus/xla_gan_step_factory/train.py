import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch import nn

from gan_steps import evaluate, make_gan_step

device = xm.xla_device()
generator = nn.Sequential(nn.Linear(128, 784), nn.Tanh()).to(device)
discriminator = nn.Sequential(nn.Linear(784, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1)).to(device)
g_optimizer = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
d_optimizer = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
images = torch.utils.data.TensorDataset(torch.randn(4096, 784), torch.zeros(4096))
loader = torch.utils.data.DataLoader(images, batch_size=64, drop_last=True)
held_out = torch.utils.data.DataLoader(images, batch_size=256, drop_last=True)

step = make_gan_step(generator, discriminator, g_optimizer, d_optimizer)
for epoch in range(10):
    for real, _ in pl.MpDeviceLoader(loader, device):
        losses = step(real)
    xm.master_print(f"epoch {epoch}: held-out score {evaluate(discriminator, pl.MpDeviceLoader(held_out, device))}")
