import torch
import torch_xla.distributed.xla_multiprocessing as xmp

from train import TrainLoop


def worker(index):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3, padding=1))
    images = torch.utils.data.TensorDataset(torch.randn(64, 3, 32, 32), torch.randn(64, 3, 32, 32))
    loader = torch.utils.data.DataLoader(images, batch_size=8, drop_last=True)
    TrainLoop(model, loader, torch.optim.SGD(model.parameters(), lr=0.01)).run(steps=100)


if __name__ == "__main__":
    xmp.spawn(worker)
