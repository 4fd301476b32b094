"""Where tensors go: the TPU, through PyTorch/XLA."""

import torch_xla.core.xla_model as xm


def get_device():
    return xm.xla_device()


def seed_everything(seed: int) -> None:
    xm.set_rng_state(seed)
