"""The `logs` workflow: find the logdir, open it, read or follow its scalars (rendering is the CLI's job).

The logdir is `--logdir` when given (no cluster needed), else the cluster's spec `logs.tensorboard`; a
relative directory there is taken relative to the spec file, like every path in a spec.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tpuops.access.cluster import resolve_name
from tpuops.access.guard_state import with_guard_state
from tpuops.cloud.blobs import DirBlobStore
from tpuops.context import Context
from tpuops.errors import TpuopsError, UsageError
from tpuops.logs.events import ScalarPoint
from tpuops.logs.mirror import Mirror, MirroredTail
from tpuops.logs.runs import Launch, RunMap, choose
from tpuops.logs.tail import Backoff, Pollable, Tail, Warn, follow
from tpuops.providers.blob_urls import open_blob_store
from tpuops.remote.base import LineHandler

if TYPE_CHECKING:
    from tpuops.providers.base import Provider
    from tpuops.state import ClusterState


@dataclass(frozen=True)
class LogsRequest:
    logdir: str
    tag: str | None = None
    run: str | None = None
    since: int | None = None
    download: Path | None = None
    provider: Provider | None = None  # the cluster's, whose blob stores hold the logdir (None: a --logdir alone)
    runs: RunMap | None = None  # the cluster's launches and those shown (None: runs are subdirectories, `run`)


def logs_provider(ctx: Context, name: str | None, logdir: str | None) -> Provider | None:
    """The provider of the cluster whose logs are read (None with --logdir: it is read as it is written)."""
    if logdir:
        return None
    return ctx.provider_for(state=ctx.store.require(_cluster_name(ctx, name)))


def run_map(ctx: Context, name: str | None, logdir: str | None, which: str | None) -> RunMap | None:
    """`--run ID|all` over the cluster's recorded launches (default: the current one); None with --logdir,
    where `--run` is a regular expression over subdirectories, or before the cluster's first launch."""
    if logdir:
        return None
    state = with_guard_state(ctx, ctx.store.require(_cluster_name(ctx, name)))  # a guard's relaunch is a run too
    return runs_of(state, which)


def runs_of(state: ClusterState, which: str | None) -> RunMap | None:
    """`run_map` over a state the caller holds."""
    if not state.runs:
        if which not in (None, "all"):
            raise UsageError(f"cluster '{state.name}' has no recorded run", f"start one with `tpuops launch "
                             f"{state.name}`, or read any logdir with --logdir DIR --run REGEX")
        return None
    return choose([Launch(run.id, run.restart) for run in state.runs], which, state.name)


def _cluster_name(ctx: Context, name: str | None) -> str:
    return resolve_name(ctx, name, otherwise="pass --logdir gs://BUCKET/PATH or a directory")


def open_source(ctx: Context, request: LogsRequest, warn: Warn | None = None) -> Pollable:
    """A Tail over the logdir, or over a local mirror of it with --download."""
    if request.provider is not None:
        store = request.provider.blob_store(request.logdir)
    else:
        store = open_blob_store(request.logdir, env=ctx.env)
    if isinstance(store, DirBlobStore) and store.root.exists() and not store.root.is_dir():
        raise TpuopsError(f"logdir {store.root} is a file, not a directory",
                          "give the directory the trainer writes its event files into")
    if isinstance(store, DirBlobStore) and not store.root.is_dir():
        raise TpuopsError(f"logdir {store.root} does not exist",
                          "check --logdir (or logs.tensorboard in the spec); the trainer creates it when it starts")
    label = request.runs.label if request.runs is not None else None
    if request.download is not None:
        if isinstance(store, DirBlobStore) and store.root.resolve() == request.download.resolve():
            raise UsageError("--download DIR is the logdir itself", "choose another directory")
        mirror = Mirror(store, request.download, run=request.run, warn=warn, label=label)
        return MirroredTail(mirror, tag=request.tag, run=request.run, since=request.since, warn=warn, label=label)
    return Tail(store, tag=request.tag, run=request.run, since=request.since, warn=warn, label=label)


def read_once(source: Pollable, logdir: str, runs: RunMap | None = None) -> list[ScalarPoint]:
    """Everything there is now. No event file at all is an error: a wrong logdir looks exactly like that."""
    points = source.poll()
    if source.last.files == 0 and runs is not None and runs.chosen is not None:
        raise TpuopsError(f"no TensorBoard event files of run {', '.join(sorted(runs.chosen))} under {logdir}",
                          "if training just started, wait or use -f to follow; --run all shows every run")
    if source.last.files == 0:
        raise TpuopsError(f"no TensorBoard event files under {logdir}",
                          "check the logdir (and --run); if training just started, wait or use -f to follow")
    return points


def follow_points(source: Pollable, *, interval: float, max_interval: float, until_idle: float | None,
                  warn: Warn | None = None) -> Iterator[list[ScalarPoint]]:
    """Batches of new points as they arrive; the first batch is everything there already is."""
    backoff = Backoff(initial=interval, maximum=max(interval, max_interval))
    return follow(source, backoff=backoff, until_idle=until_idle, warn=warn)



def worker_output(ctx: Context, name: str | None, *, follow: bool, on_line: LineHandler,
                  on_error: Callable[[str], None]) -> int:
    """The trainer's own output of the current run on every worker, line by line with the worker's name.

    follow: stream until the run ends everywhere (the launch's `follow`); the exit code is the worst worker's.
    Otherwise: what each worker has written so far; non-zero when a worker could not be read.
    """
    from tpuops.ops.launch import follow as follow_run
    from tpuops.ops.launch import worst_exit_code
    from tpuops.ops.remote import exec_command

    state = ctx.store.require(_cluster_name(ctx, name))
    run = state.current_run
    if run is None:
        raise UsageError(f"no run recorded for '{state.name}'", f"start one with `tpuops launch {state.name}`")
    if follow:
        results = follow_run(ctx, state.name, run.id, on_line=on_line).results
        code = worst_exit_code(results)
    else:
        # The run's directory on a worker, as the host scripts lay it out (shipped/follow.sh).
        log = f'"$HOME/tpuops/{state.name}/runs/{run.id}/output.log"'
        results = exec_command(ctx, state.name, f"cat {log}", on_line=on_line).results
        code = 0 if all(result.exit_code == 0 for result in results) else 1
    for result in results:
        if result.error:
            on_error(result.error)
    return code
