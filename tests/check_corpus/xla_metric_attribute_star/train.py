"""A PyTorch/XLA segmentation trainer whose validation feeds a metric object kept as an attribute."""

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from metrics import *


class Runner:
    def __init__(self, model, train_loader, valid_loader) -> None:
        self.device = xm.xla_device()
        self.model = model.to(self.device)
        self.train_loader, self.valid_loader = train_loader, valid_loader
        self.iou = PixelIoU(bins=2)
        self.optimizer = torch.optim.Adam(self.model.parameters())

    def validate(self) -> float:
        self.iou.reset()
        self.model.eval()
        with torch.no_grad():
            for images, masks in pl.MpDeviceLoader(self.valid_loader, self.device):
                preds = torch.sigmoid(self.model(images))
                self.iou.update(preds, masks)
        return self.iou.value()

    def train_epoch(self) -> None:
        self.model.train()
        for images, masks in pl.MpDeviceLoader(self.train_loader, self.device):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(self.model(images), masks)
            loss.backward()
            xm.optimizer_step(self.optimizer)
