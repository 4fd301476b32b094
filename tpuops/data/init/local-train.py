"""A first trainer for the local simulator, written by `tpuops init --template local` next to the spec.

Replace it with yours; it shows what tpuops gives every worker's trainer. Each worker fits y = 3x + 2 on its
own shard of made-up data with numpy, prints `step N loss X` (what `tpuops watch` reads as progress when there
are no scalars), and worker 0 writes loss and learning_rate as TensorBoard scalars into --logdir
($TPUOPS_LOGDIR: `tpuops logs NAME` reads them). It needs only numpy and tensorboard, which tpuops installs.

Run alone: python3 train.py --logdir /tmp/logs
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np


def scalar_writer(logdir: str):  # noqa: ANN201  (TensorBoard's EventFileWriter)
    # TensorBoard's stub instead of TensorFlow, even where TensorFlow is installed: importing it takes seconds.
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    return EventFileWriter(logdir, flush_secs=2)


def write_scalars(writer, step: int, values: dict[str, float]) -> None:  # noqa: ANN001
    from tensorboard.compat.proto import event_pb2, summary_pb2

    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)
                                         for tag, value in values.items()])
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", default=os.environ.get("TPUOPS_LOGDIR"), help="TensorBoard event files here")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    worker = int(os.environ.get("TPUOPS_WORKER_ID", "0"))
    workers = int(os.environ.get("TPUOPS_NUM_WORKERS", "1"))
    print(f"worker {worker} of {workers}, run {os.environ.get('TPUOPS_RUN_ID', '(not under tpuops)')}", flush=True)

    rng = np.random.default_rng(worker)  # each worker its own shard of the data
    x = rng.uniform(-1, 1, 256)
    y = 3 * x + 2 + rng.normal(0, 0.1, x.size)
    weight = bias = 0.0
    writer = scalar_writer(args.logdir) if args.logdir and worker == 0 else None
    for step in range(1, args.steps + 1):
        error = weight * x + bias - y
        loss = float(np.mean(error ** 2))
        weight -= args.lr * float(np.mean(2 * error * x))
        bias -= args.lr * float(np.mean(2 * error))
        if writer is not None:
            write_scalars(writer, step, {"loss": loss, "learning_rate": args.lr})
        if step % 20 == 0 or step == args.steps:
            print(f"step {step} loss {loss:.4f}", flush=True)
        time.sleep(0.01)  # a real step takes a while: `tpuops logs NAME -f` has something to follow
    if writer is not None:
        writer.close()
    print(f"done: y = {weight:.2f} x + {bias:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
