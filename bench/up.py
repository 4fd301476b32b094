"""How parallel is `tpuops up`? Its wall time against the slowest resource and against the sum of all; and the
same TPU time through Compute Engine (tpu.api: compute) side by side.

Latencies are injected in the wire-level fakes (tests/fakes): the TPU takes 3 s to create, the client VM
2 s, the bucket 0.5 s. `up` runs in-process (imports warmed up first, so the numbers are about the
workflow, not Python start-up) with a 0.1 s poll interval. Goal: within 10% of the slowest resource.
The Compute Engine rows give the TPU the same 3 s: a v6e-8 as one instance (its create operation), a TPU7x-16
slice as a workload policy, an instance template and a group (the group's insert call), each with the bucket.

    python bench/up.py [--tpu 3] [--vm 2] [--bucket 0.5] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.cloud import FakeGcp, start_fake_gcp  # noqa: E402
from tests.gcs_emulator import start_emulator, stop_emulator  # noqa: E402
from tpuops.context import Context  # noqa: E402
from tpuops.ops.up import up  # noqa: E402

POLL_INTERVAL = "0.1"


def write_spec(directory: Path, name: str, with_vm_and_bucket: bool) -> Path:
    extra = f"client_vm: {{machine_type: n1-standard-2}}\nbucket: {{name: bench-{uuid.uuid4().hex[:10]}}}\n"
    text = f"name: {name}\nzone: europe-west4-a\ntpu: {{type: v3-8, runtime: tpu-vm-tf-2.16.1-pjrt}}\n"
    path = directory / f"{name}.yaml"
    path.write_text(text + (extra if with_vm_and_bucket else ""))
    return path


def write_compute_spec(directory: Path, name: str, slice_: bool) -> Path:
    tpu, zone = ("{type: tpu7x-16}", "us-central1-c") if slice_ else ("{type: v6e-8, api: compute}", "us-east1-d")
    path = directory / f"{name}.yaml"
    path.write_text(f"name: {name}\nzone: {zone}\ntpu: {tpu}\nbucket: {{name: bench-{uuid.uuid4().hex[:10]}}}\n")
    return path


def timed_up(fake: FakeGcp, home: Path, spec: Path) -> float:
    env = {**fake.env, "TPUOPS_HOME": str(home), "TPUOPS_POLL_INTERVAL": POLL_INTERVAL}
    ctx = Context.from_env(env=env)
    start = time.perf_counter()
    result = up(ctx, spec)
    elapsed = time.perf_counter() - start
    assert not result.created_nothing, "the bench must create, not adopt"
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tpu", type=float, default=3.0)
    parser.add_argument("--vm", type=float, default=2.0)
    parser.add_argument("--bucket", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    emulator = start_emulator()
    fake = start_fake_gcp(emulator.host)
    try:
        fake.tpu.create_seconds = args.tpu
        fake.gcs.faults.delay("POST", r"/storage/v1/b$", args.bucket)
        fake.compute_api.server.faults.delay("POST", r"/instanceGroupManagers$", args.tpu)  # the slice's group
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            fake.compute.create_seconds = args.vm
            timed_up(fake, directory / "warm", write_spec(directory, "warmup", True))  # imports, connections
            full, tpu_only, instance, group = [], [], [], []
            for run in range(args.runs):
                fake.compute.create_seconds = args.vm  # the client VM
                full.append(timed_up(fake, directory / f"h{run}", write_spec(directory, f"full-{run}", True)))
                tpu_only.append(timed_up(fake, directory / f"t{run}", write_spec(directory, f"tpu-{run}", False)))
                fake.compute.create_seconds = args.tpu  # the TPU is the instance now
                instance.append(timed_up(fake, directory / f"i{run}", write_compute_spec(directory, f"i-{run}", False)))
                group.append(timed_up(fake, directory / f"g{run}", write_compute_spec(directory, f"g-{run}", True)))
    finally:
        fake.stop()
        stop_emulator(emulator.process)

    slowest, total = max(args.tpu, args.vm, args.bucket), args.tpu + args.vm + args.bucket
    wall, alone = statistics.median(full), statistics.median(tpu_only)
    print(f"injected latencies: TPU {args.tpu}s, client VM {args.vm}s, bucket {args.bucket}s "
          f"(slowest {slowest}s, sum {total}s); poll interval {POLL_INTERVAL}s; median of {args.runs} runs")
    print(f"up, everything      : {wall:6.2f}s  (runs: {', '.join(f'{t:.2f}' for t in full)})")
    print(f"up, the TPU alone   : {alone:6.2f}s  (runs: {', '.join(f'{t:.2f}' for t in tpu_only)})")
    print(f"ratio to the slowest resource (injected {slowest}s): {wall / slowest:.2f}")
    print(f"ratio to `up` of the slowest resource alone       : {wall / alone:.2f}")
    print(f"ratio to the sum of all resources ({total}s)         : {wall / total:.2f}")
    on_instance, on_group = statistics.median(instance), statistics.median(group)
    print(f"Compute Engine (tpu.api: compute), the TPU {args.tpu}s and the bucket {args.bucket}s:")
    print(f"up, v6e-8 as one VM : {on_instance:6.2f}s  (runs: {', '.join(f'{t:.2f}' for t in instance)})  "
          f"ratio to the TPU's {args.tpu}s: {on_instance / args.tpu:.2f}")
    print(f"up, TPU7x-16 slice  : {on_group:6.2f}s  (runs: {', '.join(f'{t:.2f}' for t in group)})  "
          f"ratio to the TPU's {args.tpu}s: {on_group / args.tpu:.2f}")
    goal = wall <= 1.10 * slowest
    print(f"goal (within 10% of the slowest): {'met' if goal else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
