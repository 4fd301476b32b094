"""A diffusion-style training loop on PyTorch/XLA that logs its gradient norm every step."""
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from half_precision import HalfPrecisionHelper


class TrainLoop:
    def __init__(self, model, loader, optimizer, use_fp16=False):
        self.device = xm.xla_device()
        self.model, self.loader, self.optimizer = model.to(self.device), loader, optimizer
        self.helper = HalfPrecisionHelper(model) if use_fp16 else None
        self.history = []

    def run(self, steps):
        batches = pl.MpDeviceLoader(self.loader, self.device)
        for step, (images, noise) in enumerate(batches):
            loss = torch.nn.functional.mse_loss(self.model(images + noise), noise)
            loss.backward()
            grad_norm, weight_norm = self._norms()
            print(f"step {step}: grad norm {grad_norm.item():.3f}")
            self.history.append(weight_norm.item())
            if self.helper is not None:
                print(self.helper.scale_report())
            xm.optimizer_step(self.optimizer)
            self.optimizer.zero_grad()
            if step == steps:
                break

    def _norms(self):
        grads = [p.grad.norm() for p in self.model.parameters() if p.grad is not None]
        weights = [p.norm() for p in self.model.parameters()]
        return torch.stack(grads).norm(), torch.stack(weights).norm()
