"""PyTorch/XLA SPMD: a mesh, sharded inputs, mark_step each iteration."""
import numpy as np
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()


def train(model, loader, steps, lr=1e-3):
    num_devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(num_devices), (num_devices, 1), ("data", "model"))
    device = xm.xla_device()
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        xs.mark_sharding(x, mesh, ("data", None))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if loss.isnan():
            raise RuntimeError("nan loss")
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        xm.mark_step()
        print("step", step, "loss", loss)
        if num_devices > 1 and step == 0:
            print("sharded over", num_devices, "devices")
        if step + 1 >= steps:
            break
