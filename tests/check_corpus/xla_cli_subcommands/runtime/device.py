"""The device, whichever is there: a TPU through PyTorch/XLA, else CUDA, else the CPU."""
import torch

_xm = None


def _load_xla():
    global _xm
    try:
        import torch_xla.core.xla_model as xm
    except ImportError:
        return False
    _xm = xm
    return True


def get_device():
    if _load_xla():
        return _xm.xla_device()
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def end_step():
    """PyTorch/XLA runs the graph queued so far; elsewhere there is nothing to do."""
    if _xm is not None:
        _xm.mark_step()
