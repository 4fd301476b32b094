"""A small training library in the style of many: a Learner whose `fit` runs a PyTorch/XLA training loop and,
after each epoch, a validation loop. The validation loop has no step end: every `loss.item()` in it runs the
graph built so far and waits for the device, batch after batch."""
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


class Learner:
    def __init__(self, model, optimizer, train_loader, val_loader, log_every=50):
        self.device = xm.xla_device()
        self.model = model.to(self.device)
        self.optimizer = optimizer
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.log_every = log_every
        self.history = []

    def fit(self, epochs):
        for epoch in range(epochs):
            self.model.train()
            loader = pl.MpDeviceLoader(self.train_loader, self.device)
            for step, batch in enumerate(loader):
                loss = self.training_step(batch)
                if step % self.log_every == 0:
                    xm.add_step_closure(self._log, args=(epoch, step, loss))
            self.history.append(self.validate())
        return self.history

    def training_step(self, batch):
        self.optimizer.zero_grad()
        loss = self.model(**batch).loss
        loss.backward()
        xm.optimizer_step(self.optimizer)
        return loss

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        total, batches = 0.0, 0
        for batch in self.val_loader:
            batch = {k: v.to(self.device) for k, v in batch.items()}
            loss = self.model(**batch).loss
            total += loss.item()
            batches += 1
        return total / max(batches, 1)

    @torch.no_grad()
    def validate_on_device(self):
        self.model.eval()
        total = torch.zeros((), device=self.device)
        for batch in self.val_loader:
            batch = {k: v.to(self.device) for k, v in batch.items()}
            total += self.model(**batch).loss.detach()
            xm.mark_step()
        return total.item()

    def _log(self, epoch, step, loss):
        print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
