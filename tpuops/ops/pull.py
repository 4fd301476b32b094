"""`tpuops pull`: a file or directory from one worker (or each of them) into a local directory, incrementally and
resumably (`remote/pull.py`), over the same runners, keys and pinned host keys as exec and push."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpuops.access.cluster import cluster_access, make_runners
from tpuops.access.workers import select_workers
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.remote.base import Runner, RunResult
from tpuops.remote.fanout import DEFAULT_MAX_PARALLEL, run_each
from tpuops.remote.pull import ProgressHandler, WorkerPull, pull_path


@dataclass(frozen=True)
class PullReport:
    cluster: str
    remote: str
    workers: tuple[WorkerPull, ...]

    @property
    def ok(self) -> bool:
        return bool(self.workers) and all(w.ok for w in self.workers)

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "remote": self.remote, "ok": self.ok,
                "workers": [w.as_dict() for w in self.workers]}


def pull(
    ctx: Context,
    name: str | None,
    remote: str,
    local: Path,
    *,
    worker: str = "0",
    connect_timeout: float | None = None,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    on_new_host_key: Callable[[str, str], None] | None = None,
    on_progress: ProgressHandler | None = None,
) -> PullReport:
    """`remote` (relative to the worker's home, or absolute, `~/` allowed) into `local`/BASENAME: from worker 0 by
    default; with several workers (`all`, or a list), into `local`/wN/BASENAME, one folder per worker.
    Per-worker failures and refused names are in the report, never raised."""
    if not remote.strip():
        raise UsageError("no remote path given", "e.g. `tpuops pull NAME ~/checkpoints ./out`")
    if local.exists() and not local.is_dir():
        raise UsageError(f"{local} is a file, not a directory", "give the local directory to pull into")
    access = cluster_access(ctx, name)
    chosen = select_workers(access.workers, worker)
    per_worker = worker.strip().lower() == "all" or len(chosen) > 1
    runners = make_runners(access, chosen, connect_timeout=connect_timeout, on_new_host_key=on_new_host_key)
    outcomes: dict[str, WorkerPull] = {}

    def one(runner: Runner) -> RunResult:
        outcome = pull_path(runner, remote, local / runner.name if per_worker else local, on_progress)
        outcomes[runner.name] = outcome
        return RunResult(runner.name, 0 if outcome.ok else 1, outcome.duration, outcome.error)

    try:
        results = run_each(runners, one, max_parallel)
    finally:
        for runner in runners:
            runner.close()
    # A worker that could not be reached (or whose host key was refused) has only its RunResult.
    return PullReport(access.state.name, remote, tuple(
        outcomes.get(result.worker)
        or WorkerPull(result.worker, str(local), error=result.error, duration=result.duration) for result in results))
