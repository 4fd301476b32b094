"""Small synthetic data in the formats the trainers of runs.yaml read (their `setup:` calls it), so a few steps run
on this machine without the real data sets: random values, the right layout.

    python fakedata.py mnist DIR N_TRAIN N_TEST       DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte
    python fakedata.py tokens FILE N [VOCAB]          N random uint16 token ids (nanoGPT's train.bin)
    python fakedata.py images DIR N SIZE [EXT]        N random RGB images of SIZE x SIZE, DIR/00000.png ...
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np

RANDOM = np.random.default_rng(0)


def mnist(folder: str, n_train: str, n_test: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for prefix, count in (("train", int(n_train)), ("t10k", int(n_test))):
        images = RANDOM.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        labels = RANDOM.integers(0, 10, count, dtype=np.uint8)
        (out / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, count, 28, 28) + images.tobytes())
        (out / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, count) + labels.tobytes())


def tokens(file: str, count: str, vocab: str = "50000") -> None:
    Path(file).parent.mkdir(parents=True, exist_ok=True)
    RANDOM.integers(0, int(vocab), int(count), dtype=np.uint16).tofile(file)


def images(folder: str, count: str, size: str, ext: str = "png") -> None:
    from PIL import Image

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for index in range(int(count)):
        pixels = RANDOM.integers(0, 256, (int(size), int(size), 3), dtype=np.uint8)
        Image.fromarray(pixels).save(out / f"{index:05d}.{ext}")


if __name__ == "__main__":
    {"mnist": mnist, "tokens": tokens, "images": images}[sys.argv[1]](*sys.argv[2:])
