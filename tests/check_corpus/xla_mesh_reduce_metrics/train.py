"""Eight cores agree on the loss: every step, and once per log interval."""
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp

LOG_EVERY = 50


def train_loop(model, loader, optimizer):
    model.train()
    for step, (images, labels) in enumerate(loader):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        xm.optimizer_step(optimizer)
        mean_loss = xm.mesh_reduce("train_loss", loss, lambda xs: sum(xs) / len(xs))
        xm.master_print(f"step {step} loss {mean_loss.item():.4f}")
        if step % LOG_EVERY == 0:
            accuracy = (model(images).argmax(-1) == labels).float().mean()
            agreed = xm.mesh_reduce("train_acc", accuracy, lambda xs: sum(xs) / len(xs))
            xm.master_print(f"step {step} accuracy {agreed:.3f}")


def run(index):
    device = xm.xla_device()
    model = torch.nn.Linear(32, 10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(8, 32), torch.randint(0, 10, (8,))) for _ in range(200)]
    train_loop(model, pl.MpDeviceLoader(data, device), optimizer)


if __name__ == "__main__":
    xmp.spawn(run, args=())
