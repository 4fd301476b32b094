"""A language model on a library's own LightningModule (a vendor's tensor-parallel base class) with manual
optimization: what it logs happens in the hooks Lightning calls around every batch, not in training_step."""
import torch
from accel_kit.lightning import ParallelLTModule
from lightning.pytorch.callbacks import Callback


class CausalLM(ParallelLTModule):
    def __init__(self, model, accumulation=4):
        super().__init__()
        self.model = model
        self.accumulation = accumulation
        self.automatic_optimization = False
        self.loss = None
        self.boundary = False

    def training_step(self, batch, batch_idx):
        loss = self.model(**batch).loss / self.accumulation
        self.manual_backward(loss)
        self.boundary = (batch_idx + 1) % self.accumulation == 0
        if self.boundary:
            self.optimizers().step()
            self.optimizers().zero_grad()
        self.loss = loss.detach()
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.boundary:
            print(f"step {self.global_step} loss {self.loss.detach().cpu().item():.4f}")
            self.log("input_tokens", torch.sum(batch["input_ids"].cpu()).item())

    def on_train_epoch_end(self):
        print(f"epoch done, last loss {self.loss.detach().cpu().item():.4f}")


class LossWatcher(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        trainer.progress.append(outputs["loss"].item())

    def on_validation_epoch_end(self, trainer, pl_module):
        trainer.progress.append(trainer.callback_metrics["val_loss"].item())
