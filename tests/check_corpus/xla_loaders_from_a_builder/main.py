"""Entry point: one process per TPU core, each builds its loaders through a helper and hands them to `fit`."""
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp

from engine.loop import fit, summarize_labels


def make_loaders(batch_size, device):
    """The training and validation batches, already on the device when there are several cores."""
    world = xm.xrt_world_size()
    train = torch.utils.data.TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))
    val = torch.utils.data.TensorDataset(torch.randn(128, 16), torch.randint(0, 4, (128,)))
    train_loader = torch.utils.data.DataLoader(train, batch_size=batch_size, drop_last=True)
    val_loader = torch.utils.data.DataLoader(val, batch_size=batch_size, drop_last=True)
    if world > 1:
        train_loader = pl.MpDeviceLoader(train_loader, device)
        val_loader = pl.MpDeviceLoader(val_loader, device)
    return train, train_loader, val_loader


def label_loader(batch_size):
    """The labels alone, read on the host to weigh the classes."""
    labels = torch.utils.data.TensorDataset(torch.randint(0, 4, (512,)))
    return torch.utils.data.DataLoader(labels, batch_size=batch_size)


def worker(index):
    device = xm.xla_device()
    model = torch.nn.Linear(16, 4).to(device)
    _, train_loader, val_loader = make_loaders(32, device)
    weights = summarize_labels(label_loader(64))
    fit(model, train_loader, val_loader, weights.to(device), epochs=3)


if __name__ == "__main__":
    xmp.spawn(worker, args=())
