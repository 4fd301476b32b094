"""One way the entry script may run the model: see run.py for which one a run takes."""
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from model import build_model, build_loader


def evaluate(config):
    device = xm.xla_device()
    model = build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for features, labels in pl.MpDeviceLoader(build_loader(config), device):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(features), labels)
        loss.backward()
        xm.optimizer_step(optimizer)
        print("evaluate loss", loss.item())
