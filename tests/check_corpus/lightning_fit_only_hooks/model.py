"""A Lightning regressor: its training step runs under `fit`; its test and predict steps only when asked."""
import lightning as L
import torch
from torch import nn


class Regressor(L.LightningModule):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 1))
        self.loss = nn.MSELoss()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.loss(self(x), y)
        self.log("train/loss", loss, sync_dist=True)
        return loss

    def test_step(self, batch, batch_idx):
        x, y = batch
        errors = (self(x) - y).abs().cpu().numpy()
        self.test_errors.extend(errors.tolist())

    def predict_step(self, batch, batch_idx):
        return self(batch[0]).cpu()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)
