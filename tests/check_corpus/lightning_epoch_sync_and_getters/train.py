"""A Lightning classifier on 8 TPU cores with optional adapter modules looked up by name."""
import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.adapters = nn.ModuleDict()

    def get_adapter_module(self, name: str):
        return self.adapters[name] if name in self.adapters else None

    def forward(self, x):
        h = self.proj(x)
        adapter = self.get_adapter_module("lora")
        if adapter:
            h = h + adapter(x)
        return torch.relu(h)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.block = Block(32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.block(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train/loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("val/loss", loss, on_step=False, on_epoch=True, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    trainer = L.Trainer(accelerator="tpu", devices=8, max_epochs=2)
    trainer.fit(Classifier(), loader, loader)
