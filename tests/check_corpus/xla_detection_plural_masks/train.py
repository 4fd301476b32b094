"""An anchor-free detector's loss on PyTorch/XLA: the foreground masks of each image, concatenated, pick the
predictions that count."""

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from detector import Detector, coco_loader


def losses(boxes: torch.Tensor, scores: torch.Tensor, targets: list[dict]) -> torch.Tensor:
    fg_masks, box_targets, anchor_weights = [], [], []
    for image, target in enumerate(targets):
        fg_masks.append(target["assigned"] >= 0)
        box_targets.append(target["boxes"])
        anchor_weights.append(target["weights"])
    fg_masks = torch.cat(fg_masks, 0)
    weights = torch.cat(anchor_weights, 0)
    box_loss = F.l1_loss(boxes.view(-1, 4)[fg_masks], torch.cat(box_targets, 0))
    score_loss = F.binary_cross_entropy_with_logits(scores.view(-1), fg_masks.float(), weight=weights)
    return box_loss + score_loss


def train() -> None:
    device = xm.xla_device()
    model = Detector().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for images, targets in pl.MpDeviceLoader(coco_loader("train2017"), device):
        optimizer.zero_grad()
        boxes, scores = model(images)
        loss = losses(boxes, scores, targets)
        loss.backward()
        xm.optimizer_step(optimizer)


if __name__ == "__main__":
    train()
