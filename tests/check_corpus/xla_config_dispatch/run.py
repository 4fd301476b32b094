"""Entry script: the run's mode comes from the command line, the core layout from a config object."""
import argparse

import torch_xla.distributed.xla_multiprocessing as xmp

from config import Config
from loops.evaluate import evaluate
from loops.test_multi import run as run_multi
from loops.test_single import run as run_single
from loops.train import train


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="train")
    args = parser.parse_args()
    config = Config()
    if args.mode == "train":
        train(config)
    elif args.mode == "evaluate":
        evaluate(config)
    if args.mode != "test":
        return
    if config.cores == "single":
        run_single(config)
    elif config.cores == "multi":
        xmp.spawn(run_multi, args=(config,))


if __name__ == "__main__":
    main()
