import numpy as np


class HalfPrecisionHelper:
    """Keeps float32 master weights for a float16 model; its norms are NumPy floats for the loss scaler."""

    def __init__(self, model):
        self.master = [p.detach().float() for p in model.parameters()]

    def _norms(self):
        grads = [float(p.grad.norm()) for p in self.master if p.grad is not None]
        weights = [float(p.norm()) for p in self.master]
        return np.sqrt(np.sum(np.square(grads))), np.sqrt(np.sum(np.square(weights)))

    def scale_report(self):
        grad_norm, weight_norm = self._norms()
        return f"{grad_norm.item():.3f} / {weight_norm.item():.3f}"
