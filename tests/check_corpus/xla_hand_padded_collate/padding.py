"""Padding helpers of a speech pipeline, written by hand."""

import numpy as np
import torch
import torch.nn.functional as F


def pad_ids(sequences, max_len=None, value=0):
    """Pad 1-D arrays to `max_len`, by default to the longest of them."""
    if max_len is None:
        max_len = max(len(s) for s in sequences)
    return np.stack([np.pad(s, (0, max_len - len(s)), constant_values=value) for s in sequences])


def pad_frames(frames):
    def widen(x, length):
        return F.pad(x, (0, 0, 0, length - x.size(0)))

    longest = max([x.size(0) for x in frames])
    return torch.stack([widen(x, longest) for x in frames])


def pad_to_bucket(sequences, bucket=256):
    out = np.zeros((len(sequences), bucket), dtype=np.int64)
    for row, s in enumerate(sequences):
        out[row, : min(len(s), bucket)] = s[:bucket]
    return out
