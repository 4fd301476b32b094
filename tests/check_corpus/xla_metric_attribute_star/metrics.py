"""Segmentation metrics kept on the host, the way many GPU repositories write them."""

import numpy as np


class PixelIoU:
    def __init__(self, bins: int = 10) -> None:
        self.bins = bins
        self.reset()

    def reset(self) -> None:
        self.inter = np.zeros(self.bins)
        self.union = np.zeros(self.bins)

    def update(self, preds, labels) -> None:
        hits = (preds > 0.5) & (labels > 0.5)
        inter, _ = np.histogram(hits.float().cpu(), bins=self.bins)
        union, _ = np.histogram(((preds > 0.5) | (labels > 0.5)).float().cpu(), bins=self.bins)
        self.inter += inter
        self.union += union

    def value(self) -> float:
        return float(self.inter.sum() / max(self.union.sum(), 1.0))
