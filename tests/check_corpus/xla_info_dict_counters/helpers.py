"""Helpers that keep a training step's state in one dict: plain counters from the config, the loss tensor."""


def make_info(accum_grad: int, log_interval: int, save_every: int) -> dict:
    return {"batch_idx": 0, "accum_grad": accum_grad, "log_interval": log_interval, "save_every": save_every,
            "loss": None}


def record_loss(info: dict, loss) -> None:
    info["loss"] = loss.detach()
