import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset


def batches(seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    rows = TensorDataset(torch.randn(1024, 16, generator=generator), torch.randn(1024, 1, generator=generator))
    return DataLoader(rows, batch_size=64, drop_last=True)


class Loop:
    def __init__(self, epochs: int) -> None:
        self.epochs = epochs
        self.device = xm.xla_device()
        self.model = torch.nn.Linear(16, 1).to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def fit(self) -> None:
        for epoch in range(self.epochs):
            for inputs, targets in pl.MpDeviceLoader(batches(epoch), self.device):
                self.optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(self.model(inputs), targets)
                loss.backward()
                xm.optimizer_step(self.optimizer)
                progress = f"epoch {epoch} loss {loss.item():.4f}"
                print(progress)
            xm.master_print(f"epoch {epoch} done")

    def assess(self, checkpoint: str) -> float:
        self.model.load_state_dict(torch.load(checkpoint))
        errors = []
        for inputs, targets in pl.MpDeviceLoader(batches(99), self.device):
            errors.append(torch.nn.functional.mse_loss(self.model(inputs), targets).item())
        return sum(errors) / len(errors)
