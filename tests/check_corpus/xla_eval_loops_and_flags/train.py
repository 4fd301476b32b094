"""A PyTorch/XLA segmentation trainer: an EMA copy of the model scored every N steps, a metric logger wrapping
the device loader, and an evaluator given the device loader."""

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from evaluation import Evaluator, smoke_test


class MetricLogger:
    def log_every(self, iterable, every: int):
        for i, item in enumerate(iterable):
            if i % every == 0:
                print("at", i)
            yield item


def decays(path, leaf) -> bool:
    name = path[-1] if path else ""
    return name != "bias" and leaf is not None


def forward_with(model, images, pos_encoding=None, extras=(), scale=1.0):
    if pos_encoding:
        images = pos_encoding(images)
    if pos_encoding and scale > 1.0:
        images = images * scale
    if not extras:
        return model(images)
    return model(images) + sum(extras)


def train(model, ema, train_loader, valid_loader, optimizer, steps: int) -> None:
    device = xm.xla_device()
    logger = MetricLogger()
    for step, batch in enumerate(pl.MpDeviceLoader(train_loader, device)):
        loss = forward_with(model, batch["image"]).mean()
        loss.backward()
        xm.optimizer_step(optimizer)
        if step % 1000 == 0:
            ema.eval()
            for images, labels in pl.MpDeviceLoader(valid_loader, device):
                scores = ema(images)
                print("score", scores.mean().cpu().numpy(), labels.shape)
        if step >= steps:
            break
    valid_device_loader = pl.MpDeviceLoader(valid_loader, device)
    for batch in logger.log_every(valid_device_loader, 100):
        predictions = model(batch["image"])
        xm.master_print(predictions.argmax(1).cpu())
    evaluator = Evaluator(model, num_classes=1)
    print(evaluator.evaluate(valid_device_loader))
    print(smoke_test(model, valid_device_loader))
