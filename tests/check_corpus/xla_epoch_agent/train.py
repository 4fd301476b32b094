"""The entry point: builds the loaders and runs the agent on every core."""
import torch
import torch_xla.distributed.xla_multiprocessing as xmp

from agent import FinetuneAgent


def _mp_fn(index):
    data = [{"prompt": torch.randint(0, 100, (8,)), "prompt_mask": torch.ones(8, dtype=torch.long),
             "answer": torch.randint(0, 100, (4,)), "labels": torch.randint(0, 100, (12,))}] * 16
    loaders = {"train": torch.utils.data.DataLoader(data, batch_size=4),
               "eval": torch.utils.data.DataLoader(data, batch_size=4)}
    FinetuneAgent(loaders).run()


if __name__ == "__main__":
    xmp.spawn(_mp_fn)
