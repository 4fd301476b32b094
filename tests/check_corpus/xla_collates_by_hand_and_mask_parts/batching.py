"""Collate functions written by hand: reports padded to the batch's longest, and a fixed-width one."""

import numpy as np
import torch


def collate_reports(batch: list) -> tuple[torch.Tensor, torch.Tensor]:
    images, reports, lengths = zip(*batch)
    longest = max(lengths)
    ids = np.zeros((len(reports), longest), dtype=np.int64)
    for row, report in enumerate(reports):
        ids[row, : len(report)] = report
    return torch.stack(images), torch.from_numpy(ids)


class TagCollator:
    """Token ids and tags, padded to the longest sentence of the batch."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, batch: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(item["ids"]) for item in batch)
        ids = [item["ids"] + [self.pad_id] * (width - len(item["ids"])) for item in batch]
        tags = [item["tags"] + [-100] * (width - len(item["tags"])) for item in batch]
        return torch.tensor(ids), torch.tensor(tags)


class FixedTagCollator:
    """The same, to one width for every batch."""

    def __init__(self, pad_id: int, width: int = 128) -> None:
        self.pad_id = pad_id
        self.width = width

    def __call__(self, batch: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = [item["ids"][: self.width] + [self.pad_id] * (self.width - len(item["ids"])) for item in batch]
        tags = [item["tags"][: self.width] + [-100] * (self.width - len(item["tags"])) for item in batch]
        return torch.tensor(ids), torch.tensor(tags)
