"""MNIST on PyTorch/XLA, multiprocess, in the style of the reference examples."""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


class MNIST(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def _train_update(device, step, loss, tracker, epoch):
    print(f"[xla:{xm.get_ordinal()}]({step}) Loss={loss.item():.5f} Rate={tracker.rate():.2f}")


def train_mnist(flags):
    torch.manual_seed(1)
    train_loader = make_loader(flags, train=True)
    test_loader = make_loader(flags, train=False)
    device = xm.xla_device()
    model = MNIST().to(device)
    lr = flags.lr * xr.world_size()
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=flags.momentum)
    loss_fn = nn.NLLLoss()

    def train_loop_fn(loader, epoch):
        tracker = xm.RateTracker()
        model.train()
        for step, (data, target) in enumerate(loader):
            optimizer.zero_grad()
            output = model(data)
            loss = loss_fn(output, target)
            loss.backward()
            xm.optimizer_step(optimizer)
            tracker.add(flags.batch_size)
            if step % flags.log_steps == 0:
                xm.add_step_closure(_train_update, args=(device, step, loss, tracker, epoch))

    def test_loop_fn(loader):
        total_samples = 0
        correct = 0
        model.eval()
        for data, target in loader:
            output = model(data)
            pred = output.max(1, keepdim=True)[1]
            correct += pred.eq(target.view_as(pred)).sum()
            total_samples += data.size()[0]
        accuracy = 100.0 * correct.item() / total_samples
        accuracy = xm.mesh_reduce("test_accuracy", accuracy, np.mean)
        return accuracy

    train_device_loader = pl.MpDeviceLoader(train_loader, device)
    test_device_loader = pl.MpDeviceLoader(test_loader, device)
    max_accuracy = 0.0
    for epoch in range(1, flags.num_epochs + 1):
        xm.master_print(f"Epoch {epoch} train begin")
        train_loop_fn(train_device_loader, epoch)
        accuracy = test_loop_fn(test_device_loader)
        xm.master_print(f"Epoch {epoch} test end, Accuracy={accuracy:.2f}")
        max_accuracy = max(accuracy, max_accuracy)
        if xm.is_master_ordinal():
            torch.save(model.state_dict(), os.path.join(flags.logdir, "mnist.pt"))
    return max_accuracy


def make_loader(flags, train):
    from torchvision import datasets, transforms
    dataset = datasets.MNIST(flags.datadir, train=train, download=True, transform=transforms.ToTensor())
    sampler = None
    if xr.world_size() > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(
            dataset, num_replicas=xr.world_size(), rank=xr.global_ordinal(), shuffle=train)
    return torch.utils.data.DataLoader(dataset, batch_size=flags.batch_size, sampler=sampler,
                                       drop_last=flags.drop_last, shuffle=False if sampler else train)


def _mp_fn(index, flags):
    torch.set_default_dtype(torch.float32)
    accuracy = train_mnist(flags)
    if flags.target_accuracy and accuracy < flags.target_accuracy:
        print(f"Accuracy {accuracy} is below target {flags.target_accuracy}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--datadir", default="/tmp/mnist-data")
    parser.add_argument("--logdir", default="/tmp/mnist-logs")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--num_epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--log_steps", type=int, default=20)
    parser.add_argument("--drop_last", action="store_true")
    parser.add_argument("--target_accuracy", type=float, default=0.0)
    xmp.spawn(_mp_fn, args=(parser.parse_args(),))
