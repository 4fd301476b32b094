"""Small synthetic data in the formats the trainers of runs.yaml read (their `setup:` calls it), so a few steps run
on this machine without the real data sets: random values, the right layout.

    python fakedata.py mnist DIR N_TRAIN N_TEST       DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte
    python fakedata.py cifar DIR N                    CIFAR-10's python pickles: data_batch_1..5 and test_batch, N each
    python fakedata.py tokens FILE N [VOCAB]          N random uint16 token ids (nanoGPT's train.bin)
    python fakedata.py images DIR N SIZE [EXT]        N random RGB images of SIZE x SIZE, DIR/00000.png ...
    python fakedata.py masks DIR N SIZE               DIR/{images,masks}/NAME.png, trainval.txt, test.txt
    python fakedata.py rna DIR N LENGTH               DIR/{train,validation}_{sequences,labels}.csv (Kaggle RNA 3D)
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


def cifar(folder: str, count: str) -> None:
    import pickle

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": RANDOM.integers(0, 256, (int(count), 3072), dtype=np.uint8),
                 b"labels": RANDOM.integers(0, 10, int(count)).tolist()}
        (out / name).write_bytes(pickle.dumps(batch))


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


def masks(folder: str, count: str, size: str) -> None:
    from PIL import Image

    out = Path(folder)
    images(str(out / "images"), count, size)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    names = [f"{index:05d}" for index in range(int(count))]
    for name in names:
        mask = (RANDOM.random((int(size), int(size))) > 0.97).astype(np.uint8) * 255
        Image.fromarray(mask, mode="L").save(out / "masks" / f"{name}.png")
    half = len(names) // 2
    (out / "trainval.txt").write_text("\n".join(names[:half]) + "\n")
    (out / "test.txt").write_text("\n".join(names[half:]) + "\n")


def rna(folder: str, count: str, length: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "validation"):
        sequences, labels = ["target_id,sequence"], ["ID,resname,resid,x_1,y_1,z_1"]
        for index in range(int(count)):
            target = f"T{split[0]}{index:04d}"
            bases = "".join(RANDOM.choice(list("ACGU"), int(length)))
            sequences.append(f"{target},{bases}")
            walk = np.cumsum(RANDOM.normal(0, 3.0, (int(length), 3)), axis=0)
            labels += [f"{target}_{i + 1},{base},{i + 1},{x:.3f},{y:.3f},{z:.3f}"
                       for i, (base, (x, y, z)) in enumerate(zip(bases, walk, strict=True))]
        (out / f"{split}_sequences.csv").write_text("\n".join(sequences) + "\n")
        (out / f"{split}_labels.csv").write_text("\n".join(labels) + "\n")


if __name__ == "__main__":
    MAKERS = {"mnist": mnist, "cifar": cifar, "tokens": tokens, "images": images, "masks": masks, "rna": rna}
    MAKERS[sys.argv[1]](*sys.argv[2:])
