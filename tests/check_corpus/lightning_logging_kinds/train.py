"""A Lightning classifier trained on TPU cores: what its logging calls cost."""
import lightning as L
import torch
import torch.nn.functional as F
from torch import nn


class Classifier(L.LightningModule):
    def __init__(self, width: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, width), nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train/loss", loss)
        self.log_dict({"train/loss_again": loss}, on_step=True)
        return loss

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        accuracy = (logits.argmax(-1) == labels).float().mean()
        self.log("val/loss", loss, sync_dist=True)
        self.log("val/acc", accuracy, on_step=True)
        self.log("val/acc_epoch", accuracy, on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(512, 1, 28, 28), torch.randint(0, 10, (512,)))
    trainer = L.Trainer(accelerator="tpu", devices=8, max_epochs=1)
    trainer.fit(Classifier(), DataLoader(data, batch_size=64), DataLoader(data, batch_size=64))
