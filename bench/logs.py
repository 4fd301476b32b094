"""Reading TensorBoard scalars: tpuops' reader against TensorBoard's own, and bytes fetched while tailing.

1. Throughput: one event file of 200,000 scalars (one per event, as trainers log), read by
   - tpuops: `Tail(DirBlobStore(dir)).poll()` (listing, read, CRC32C checks, decode to ScalarPoint),
   - TensorBoard's `EventFileLoader(path).Load()` (parses the events only, no scalar extraction),
   - TensorBoard's `EventAccumulator(dir).Reload()` + `.Scalars(tag)` (what TensorBoard serves from),
   each `--runs` times, alternating, in this process; prints medians in events/s of CPU time (this process
   only: other work on a shared machine does not count) and the ratios.
   TensorBoard reads records with TensorFlow's C++ reader when TensorFlow is importable, else with its
   pure-Python stub: `--tensorboard-backend stub|tf` chooses (default: stub, TensorBoard without TF).
2. Tailing: a writer appends `--rounds` batches of 1,000 scalars to a file (a local directory, and a GCS
   object on gcp-storage-emulator unless --no-gcs); after each batch one poll. Prints bytes fetched per poll
   against bytes appended and the file size (goal: fetched == appended).

Usage: python bench/logs.py [--scalars 200000] [--runs 5] [--rounds 10] [--tensorboard-backend stub|tf]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.gcs_emulator


def choose_backend(backend: str) -> None:
    if backend == "stub":  # TensorBoard's own switch for "no TensorFlow": must precede its first use
        sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")


def write_scalars(path: Path, count: int, first_step: int = 0) -> int:
    """Append `count` one-scalar events (framed exactly as TensorBoard's writer frames them)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from tpuops.logs.tfrecord import frame_record

    chunks = []
    for step in range(first_step, first_step + count):
        value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
        event = event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[value]))
        chunks.append(frame_record(event.SerializeToString()))
    data = b"".join(chunks)
    with open(path, "ab") as out:
        out.write(data)
    return len(data)


def read_tpuops(logdir: Path) -> int:
    from tpuops.cloud.blobs import DirBlobStore
    from tpuops.logs.tail import Tail

    return len(Tail(DirBlobStore(logdir)).poll())


def read_event_file_loader(path: Path) -> int:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return sum(1 for event in EventFileLoader(str(path)).Load() if event.HasField("summary"))


def read_event_accumulator(logdir: Path, keep_all: bool) -> int:
    """Events read. keep_all: every point kept (size_guidance 0), as tpuops returns them; else TensorBoard's
    default guidance (a 10,000-point reservoir per tag), as `tensorboard --logdir` runs it."""
    from tensorboard.backend.event_processing.event_accumulator import DEFAULT_SIZE_GUIDANCE, EventAccumulator

    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0} if keep_all else DEFAULT_SIZE_GUIDANCE)
    accumulator.Reload()
    return accumulator.most_recent_step + 1  # every event was read; the reservoir keeps a sample of them


def throughput(scalars: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp)
        path = logdir / "events.out.tfevents.1700000000.bench.1.0"
        size = write_scalars(path, scalars)
        readers = {
            "tpuops Tail.poll": lambda: read_tpuops(logdir),
            "TensorBoard EventFileLoader": lambda: read_event_file_loader(path),
            "TensorBoard EventAccumulator": lambda: read_event_accumulator(logdir, keep_all=True),
            "  same, default size guidance": lambda: read_event_accumulator(logdir, keep_all=False),
        }
        samples: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(runs):
            for name, read in readers.items():  # alternate: every reader sees the same machine load
                start = time.process_time()  # CPU time: the machine is shared, wall time is others' load too
                count = read()
                samples[name].append(time.process_time() - start)
                assert count == scalars, (name, count)
    print(f"file: {scalars} scalars, {size / 1e6:.1f} MB; medians of {runs} runs")
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ours = medians["tpuops Tail.poll"]
    for name, median in medians.items():
        print(f"  {name:<30} {scalars / median:>11,.0f} events/s  ({median:.3f} s)  x{median / ours:.1f} tpuops' time")
    ratio = medians["TensorBoard EventAccumulator"] / ours
    print(f"tpuops vs EventAccumulator: {ratio:.1f}x faster (goal >= 5x): {'ok' if ratio >= 5 else 'MISSED'}")


class CountingStore:
    def __init__(self, inner) -> None:
        self.inner = inner
        self.fetched = 0

    @property
    def url(self) -> str:
        return self.inner.url

    def list(self, prefix: str = "", *, checksums: bool = False):
        return self.inner.list(prefix, checksums=checksums)

    def read_range(self, name: str, start: int, end: int) -> bytes:
        data = self.inner.read_range(name, start, end)
        self.fetched += len(data)
        return data


def tailing(rounds: int, use_gcs: bool) -> None:
    for place in ["dir"] + (["gcs"] if use_gcs else []):
        with tempfile.TemporaryDirectory() as tmp:
            tail_while_writing(place, Path(tmp) / "logs", rounds)


def tail_while_writing(place: str, logdir: Path, rounds: int) -> None:
    from tpuops.cloud.blobs import DirBlobStore
    from tpuops.logs.tail import Tail

    (logdir / "train").mkdir(parents=True)
    path = logdir / "train" / "events.out.tfevents.1700000000.bench.1.0"
    emulator = None
    store = DirBlobStore(logdir)
    blob = None
    if place == "gcs":
        from tests.gcs_emulator import start_emulator
        from tpuops.cloud.gcp.gcs_blobs import GcsBlobStore

        emulator = start_emulator()
        bucket = emulator.new_bucket()
        blob = emulator.client().bucket(bucket).blob("logs/train/" + path.name)
        store = GcsBlobStore(bucket, "logs", env=emulator.env)
    try:
        counting = CountingStore(store)
        tail = Tail(counting)
        print(f"tailing on {place}: poll  appended  fetched  file size")
        exact = True
        for round_ in range(rounds):
            appended = write_scalars(path, 1000, first_step=round_ * 1000)
            if blob is not None:
                blob.upload_from_filename(str(path))  # the whole object again, as TF's GCS writer does
            before = counting.fetched
            points = tail.poll()
            fetched = counting.fetched - before
            exact &= fetched == appended and len(points) == 1000
            print(f"  {round_ + 1:>4} {appended:>9} {fetched:>8} {path.stat().st_size:>10}")
        before = counting.fetched
        tail.poll()
        print(f"  idle poll fetched {counting.fetched - before} bytes")
        print(f"  fetched == appended on every poll: {'ok' if exact else 'MISSED'}")
    finally:
        if emulator is not None:
            from tests.gcs_emulator import stop_emulator

            stop_emulator(emulator.process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scalars", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tensorboard-backend", choices=["stub", "tf"], default="stub")
    parser.add_argument("--no-gcs", action="store_true", help="skip the GCS emulator part")
    args = parser.parse_args()
    choose_backend(args.tensorboard_backend)
    print(f"TensorBoard record reader: {'TensorFlow' if args.tensorboard_backend == 'tf' else 'pure-Python stub'}")
    throughput(args.scalars, args.runs)
    tailing(args.rounds, use_gcs=not args.no_gcs)


if __name__ == "__main__":
    main()
