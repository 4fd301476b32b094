"""Worker output that outlives the worker: each run's output kept in the bucket as it goes, and read back from there.

Launch starts `remote/output_shipper.py` on every worker beside the trainer; it writes numbered chunks under
gs://BUCKET/.tpuops/NAME/runs/FIRST_RUN/output/wN/rRRR-NNNNNN, FIRST_RUN being the run a recovery continues (the
last launch with restart 0), RRR the restart. `logs --workers --run ID` reads them, so the output of a run whose TPU
was preempted or deleted is still there, a recovered run's after its first part. Writes are one object per worker
per interval (30 s by default, only when there is new output): a few hundred class A operations an hour per worker.
Why the worker writes rather than whoever follows the run: output of a run nobody follows (`launch` alone, a guard
on a VM) must outlive the TPU too; the TPU's service account can already write the bucket (`up` grants it).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence

from tpuops.access.cluster import ClusterAccess, spec_of
from tpuops.access.guard_state import with_guard_state
from tpuops.cloud.blobs import DirBlobStore
from tpuops.cloud.endpoints import base_url
from tpuops.context import Context
from tpuops.errors import TpuopsError, UsageError
from tpuops.logs.runs import Launch, choose
from tpuops.remote.base import LineHandler, Runner, RunResult, remote_path
from tpuops.remote.fanout import run_each
from tpuops.shipped import program
from tpuops.state import ClusterState, RunRecord, bucket_of

INTERVAL_ENV = "TPUOPS_OUTPUT_INTERVAL"  # seconds between two chunks of one worker (tests: a fraction)
KEEP_ENV = "TPUOPS_KEEP_OUTPUT"  # 0: launch starts no shipper (the test suite's loopback workers)
DEFAULT_INTERVAL = 30.0
CHUNK = re.compile(r"^r(\d{3})-(\d{6})$")


def output_url(bucket: str, cluster: str, first_run: str) -> str:
    return f"gs://{bucket}/.tpuops/{cluster}/runs/{first_run}/output"


def first_run_of(runs: Sequence[RunRecord], run_id: str) -> RunRecord:
    """The run a recovery continues: this one, or the last fresh launch before it (restart 0)."""
    index = next(i for i, run in enumerate(runs) if run.id == run_id)
    while index > 0 and runs[index].restart > 0:
        index -= 1
    return runs[index]


def keep_output(ctx: Context, access: ClusterAccess, runners: Sequence[Runner], runs: Sequence[RunRecord],
                run_id: str, max_parallel: int) -> list[RunResult]:
    """Start the shipper on every worker (detached, it ends with the run); nothing without a bucket. `runs`: the
    cluster's runs as the launch recorded them, `run_id` among them."""
    bucket = bucket_of(access.state, access.spec)
    if not bucket or ctx.env.get(KEEP_ENV) == "0":
        return []
    cluster = access.state.name
    run = next(r for r in runs if r.id == run_id)
    url = output_url(bucket, cluster, first_run_of(runs, run_id).id)
    store = access.provider.blob_store(url)
    run_dir = f"~/tpuops/{cluster}/runs/{run_id}"
    interval = float(ctx.env.get(INTERVAL_ENV) or DEFAULT_INTERVAL)

    def start(runner: Runner) -> RunResult:
        config: dict[str, object] = {"run_dir": run_dir, "restart": run.restart, "interval": interval}
        if isinstance(store, DirBlobStore):  # a bucket that is a directory here (the local simulator)
            config["dir"] = str(store.root / runner.name)
        else:
            config |= {"bucket": bucket, "prefix": f"{url.split('/', 3)[3]}/{runner.name}",
                       "storage": base_url(ctx.env.get("STORAGE_EMULATOR_HOST")) or "https://storage.googleapis.com",
                       "metadata_host": ctx.env.get("GCE_METADATA_HOST") or "metadata.google.internal"}
        source = shlex.quote(program("output_shipper"))
        line = (f"cd {remote_path(run_dir)} && setsid nohup python3 -S -c {source} "
                f"{shlex.quote(json.dumps(config))} > output.shipper.log 2>&1 < /dev/null &")
        return runner.run(line, timeout=60)

    return run_each(runners, start, max_parallel)


def kept_output(ctx: Context, state: ClusterState, which: str | None, on_line: LineHandler) -> int:
    """The kept output of `which` (a run id or unique prefix, `all`, None: the current run with its recoveries),
    worker by worker, each recovery after a marker line; the number of lines. TpuopsError when none was kept.
    `state`: the cluster's, as the caller read it."""
    spec = spec_of(state)
    state = with_guard_state(ctx, state, spec)
    bucket = bucket_of(state, spec)
    if not bucket:
        raise UsageError(f"cluster '{state.name}' has no bucket, where run output is kept",
                         "add `bucket:` to the spec; until then `tpuops logs NAME --workers` reads the workers")
    if not state.runs:
        raise UsageError(f"no run recorded for '{state.name}'", f"start one with `tpuops launch {state.name}`")
    chosen = choose([Launch(r.id, r.restart) for r in state.runs], which, state.name).chosen
    # A first run named by its id comes with its recoveries: their output continues its own.
    wanted = [run for run in state.runs if chosen is None or run.id in chosen
              or first_run_of(state.runs, run.id).id in chosen]
    by_first: dict[str, list[RunRecord]] = {}
    for run in wanted:
        by_first.setdefault(first_run_of(state.runs, run.id).id, []).append(run)
    provider = ctx.provider_for(spec, state)
    count = 0
    for first, members in by_first.items():
        store = provider.blob_store(output_url(bucket, state.name, first))
        id_of = {run.restart: run.id for run in members}
        chunks: dict[str, list[tuple[int, int, str, int]]] = {}
        for info in store.list(""):
            worker, _, chunk = info.name.rpartition("/")
            match = CHUNK.match(chunk)
            if worker and match and int(match.group(1)) in id_of:
                chunks.setdefault(worker, []).append((int(match.group(1)), int(match.group(2)), info.name, info.size))
        for worker in sorted(chunks, key=_worker_order):
            restart_shown = None
            for restart, _, blob, size in sorted(chunks[worker]):
                if restart != restart_shown and restart:
                    on_line(worker, "stdout", f"-- run {id_of[restart]} (restart {restart}) --")
                restart_shown = restart
                data = store.read_range(blob, 0, size) if size else b""
                for line in data.decode("utf-8", "replace").splitlines():
                    on_line(worker, "stdout", line)
                    count += 1
    if not count:
        ids = ", ".join(run.id for run in wanted[-3:])
        raise TpuopsError(f"no output of run {ids} is kept in gs://{bucket}/.tpuops/{state.name}/runs/",
                          "output is kept for runs launched with a bucket; while the TPU is up, "
                          f"`tpuops logs {state.name} --workers` reads the workers")
    return count


def _worker_order(worker: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", worker))
