"""Export the trained JAX weights as a float16 PyTorch checkpoint for GPU inference: a storage dtype chosen for
the file, nothing here computes on a TPU."""
import pickle
import sys

import numpy as np
import torch


def to_state_dict(flat_params):
    return {name: torch.tensor(np.asarray(value, dtype=np.float32), dtype=torch.float16)
            for name, value in flat_params.items()}


def main(source, target):
    with open(source, "rb") as f:
        flat_params = pickle.load(f)
    torch.save(to_state_dict(flat_params), target)


if __name__ == "__main__":
    main(*sys.argv[1:3])
