"""What the hang watchdog costs per poll of `tpuops watch` while all is well.

A local 4-worker cluster (the local provider: workers are directories, the bucket a directory) runs a trainer
that prints `step N` every 0.2 s; the bench appends one TensorBoard step to the logdir before each poll, as a
trainer logging every few seconds would. The watchdog (`tpuops.watchdog.judge.Watchdog.judge`, what watch calls
once per poll while the run is running) is asked `--polls` times, in three set-ups:

  scalars   logs.tensorboard set, no watch.progress: the scalars only (once the first one has come)
  output    watch.progress set: worker 0's output read from a byte offset too (one SSH call per poll)
  (watch)   for comparison, what watch itself spends per poll: the run's state on every worker

For each: runner calls per poll (each one SSH session on a real cluster), listings and bytes read from the
bucket per poll, blob writes per poll (watchdog.json, at most one a minute), and the median time of a poll.

Usage: python bench/watchdog.py [--polls 20] [--workers 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class Counted:
    """Counts calls on the provider's runners and on the logdir's blob store (the bench only: it wraps, it
    changes nothing)."""

    def __init__(self) -> None:
        self.runs = self.lists = self.writes = 0

    def runners(self, make):  # noqa: ANN001, ANN201
        def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            runners = make(*args, **kwargs)
            for runner in runners:
                run = runner.run

                def counting(*a, _run=run, **k):  # noqa: ANN002, ANN003, ANN202
                    self.runs += 1
                    return _run(*a, **k)

                runner.run = counting
            return runners
        return counted


def append_step(logdir: Path, step: int) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from tpuops.logs.tfrecord import frame_record

    value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / step)
    event = event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value]))
    logdir.mkdir(parents=True, exist_ok=True)
    with open(logdir / "events.out.tfevents.1.bench", "ab") as out:
        out.write(frame_record(event.SerializeToString()))


def measure(progress: str | None, polls: int, workers: int, root: Path) -> dict[str, float]:
    from tpuops.context import Context
    from tpuops.ops import launch as launch_ops
    from tpuops.ops import up as up_ops
    from tpuops.watchdog.judge import Watchdog

    name = f"bench-{'output' if progress else 'scalars'}"
    home = root / name
    os.environ["TPUOPS_HOME"] = str(home)
    watch = f"watch: {{progress: '{progress}'}}" if progress else ""
    spec = root / f"{name}.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: {name}
        provider: local
        tpu: {{type: v2-8, workers: {workers}}}
        bucket: {{name: {name}-data}}
        logs: {{tensorboard: gs://{name}-data/tb}}
        trainer: {{framework: jax, command: 'i=0; while true; do i=$((i+1)); echo "step $i"; sleep 0.2; done'}}
        {watch}
        """))
    ctx = Context.from_env(env={**os.environ, "TPUOPS_WATCHDOG_INSTALL": "0"})
    up_ops.up(ctx, str(spec))
    launch_ops.launch_run(ctx, name)
    counted = Counted()
    state = ctx.store.require(name)
    provider = ctx.provider_for(state=state)
    provider.runners = counted.runners(provider.runners)  # type: ignore[method-assign]
    watchdog = Watchdog(ctx, name, event=lambda kind, text: None, say=lambda kind, text: None)
    logdir = home / "local" / "buckets" / f"{name}-data" / "tb"
    append_step(logdir, 1)
    watchdog.judge()  # the first poll reads what is there and sets up
    tail = watchdog.scalars.tail  # type: ignore[union-attr]
    store = tail.store
    list_blobs, upload = store.list, watchdog.store.upload_file  # type: ignore[union-attr]

    def counting_list(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        counted.lists += 1
        return list_blobs(*args, **kwargs)

    def counting_upload(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        counted.writes += 1
        return upload(*args, **kwargs)

    store.list = counting_list  # type: ignore[method-assign]
    watchdog.store.upload_file = counting_upload  # type: ignore[union-attr,method-assign]
    counted.runs = 0
    read_before = tail.total_bytes_read
    times = []
    for step in range(2, polls + 2):
        append_step(logdir, step)
        started = time.perf_counter()
        assert watchdog.judge() is None
        times.append(time.perf_counter() - started)
        time.sleep(0.2)
    watch_runs = counted.runs
    counted.runs = 0
    started = time.perf_counter()
    launch_ops.run_states(ctx, name)
    status_time, status_runs = time.perf_counter() - started, counted.runs
    launch_ops.stop(ctx, name)
    return {"runner calls": watch_runs / polls, "listings": counted.lists / polls,
            "bytes read": (tail.total_bytes_read - read_before) / polls, "writes": counted.writes / polls,
            "ms": statistics.median(times) * 1000, "watch runner calls": status_runs, "watch ms": status_time * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        results = {"scalars": measure(None, args.polls, args.workers, Path(root)),
                   "output": measure(r"step (\d+)", args.polls, args.workers, Path(root))}
    print(f"watchdog cost per poll, {args.polls} polls, {args.workers} workers, all well (local provider)")
    print(f"{'set-up':<10}{'runner calls':>14}{'listings':>10}{'bytes read':>12}{'writes':>8}{'median ms':>11}")
    for label, r in results.items():
        print(f"{label:<10}{r['runner calls']:>14.2f}{r['listings']:>10.2f}{r['bytes read']:>12.0f}"
              f"{r['writes']:>8.2f}{r['ms']:>11.1f}")
    watch = results["scalars"]
    print(f"{'(watch)':<10}{watch['watch runner calls']:>14.2f}{'-':>10}{'-':>12}{'-':>8}{watch['watch ms']:>11.1f}"
          "   the run's state on every worker, which watch reads each poll anyway")


if __name__ == "__main__":
    main()
