"""A fine-tuning agent: one method per epoch phase, each with its own step loop, and a run() over the epochs."""
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.test.test_utils as test_utils

from model import Captioner


class FinetuneAgent:
    def __init__(self, loaders, epochs: int = 3) -> None:
        self.device = xm.xla_device()
        self.model = Captioner().to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.loaders = loaders
        self.epochs = epochs

    def run(self):
        for epoch in range(self.epochs):
            xm.master_print(f"epoch {epoch} started at {test_utils.now()}")
            train_loss = self.train(epoch)
            eval_loss = self.evaluate(epoch)
            xm.master_print(f"epoch {epoch}: train {train_loss:.4f}, eval {eval_loss:.4f}")
            self.save_checkpoint(epoch)

    def save_checkpoint(self, epoch):
        xm.mark_step()
        xm.save(self.model.state_dict(), f"checkpoint_{epoch}.pt")

    def train(self, epoch):
        running = torch.tensor(0.0, device=self.device)
        batches = torch.tensor(0, device=self.device)
        self.model.train()
        for step, batch in enumerate(pl.MpDeviceLoader(self.loaders["train"], self.device)):
            xm.master_print(f"epoch {epoch} step {step} at {test_utils.now()}")
            self.optimizer.zero_grad()
            loss = self.model(batch)["loss"]
            loss.backward()
            xm.optimizer_step(self.optimizer)
            running += loss.detach()
            batches += 1
        total = xm.mesh_reduce("train_loss", running.item(), sum)
        count = xm.mesh_reduce("train_batches", batches.item(), sum)
        return total / count

    def evaluate(self, epoch):
        running = torch.tensor(0.0, device=self.device)
        self.model.eval()
        with torch.no_grad():
            for batch in pl.MpDeviceLoader(self.loaders["eval"], self.device):
                running += self.model(batch)["loss"]
                xm.mark_step()
        return xm.mesh_reduce("eval_loss", running.item(), sum)
