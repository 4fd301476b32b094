"""The `logs` workflow: find the logdir, open it, read or follow its scalars (rendering is the CLI's job).

The logdir is `--logdir` when given (no cluster needed), else the cluster's spec `logs.tensorboard`; a
relative directory there is taken relative to the spec file, like every path in a spec.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tpuops.access.cluster import resolve_name
from tpuops.access.guard_state import with_guard_state
from tpuops.cloud.blob_types import BlobInfo
from tpuops.cloud.blobs import DirBlobStore
from tpuops.context import Context
from tpuops.errors import TpuopsError, UsageError
from tpuops.logs.events import ScalarPoint
from tpuops.logs.mirror import Mirror, MirroredTail
from tpuops.logs.runs import CLOCK_SLACK, Launch, RunMap, choose, created_at
from tpuops.logs.tail import Backoff, Pollable, Tail, Warn, follow, run_of
from tpuops.providers.blob_urls import open_blob_store
from tpuops.remote.base import LineHandler
from tpuops.state import bucket_of, epoch_seconds

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
    runs: ClusterRuns | None = None  # the cluster's launches and those shown (None: runs are subdirectories, `run`)


def logs_provider(ctx: Context, name: str | None, logdir: str | None) -> Provider | None:
    """The provider of the cluster whose logs are read (None with --logdir: it is read as it is written)."""
    if logdir:
        return None
    return ctx.provider_for(state=ctx.store.require(_cluster_name(ctx, name)))


def run_map(ctx: Context, name: str | None, logdir: str | None, which: str | None) -> ClusterRuns | None:
    """`--run ID|all` over the cluster's recorded launches (default: the current one); None with --logdir,
    where `--run` is a regular expression over subdirectories."""
    if logdir:
        return None
    return ClusterRuns(ctx, _cluster_name(ctx, name), which)


class ClusterRuns:
    """Which run each event file belongs to, by the cluster's launches, and whether it is shown.

    A reader opened before a launch (`run`, whose reader skips what the logdir held before it launches; a
    `logs -f` left running) must not put the new launch's files under the launch it knew of: a file created after
    the launches were read may be a later launch's, so meeting one reads them again first. Files created before
    that read belong to launches it already knows: a run is recorded before its trainer starts (ops/launch.py).
    """

    def __init__(self, ctx: Context, cluster: str, which: str | None, held: ClusterState | None = None,
                 read_at: float | None = None) -> None:
        """`held`: the state the caller holds (`run` after `up`), read instead of the store the first time;
        `read_at`: when the caller read it from the store (its launches are known as of then), else its last save
        is taken."""
        self.ctx, self.cluster = ctx, cluster
        self.map = self._read(which, held, read_at)
        # An id named on the command line stays the one chosen; None and `all` follow the launches as they come.
        self._which = which if which in (None, "all") or self.map is None else next(iter(self.map.chosen or ()))

    @property
    def chosen(self) -> frozenset[str] | None:
        return self.map.chosen if self.map is not None else None

    def label(self, info: BlobInfo) -> str | None:
        created = created_at(info)
        if created is not None and created > self._read_at - CLOCK_SLACK:  # a worker clock may run behind ours
            with suppress(TpuopsError):  # the cluster's record unreadable now: the launches known so far
                self.map = self._read(self._which) or self.map
        if self.map is None:  # no launch recorded: runs are subdirectories (`--run all` or none)
            return run_of(info.name)
        return self.map.label(info)

    def _read(self, which: str | None, held: ClusterState | None = None,
              read_at: float | None = None) -> RunMap | None:
        # A held state knows the launches as of its last save (`run` holds up's, from before its launch): a file
        # created since then may be a later launch's. One just read from the store knows them as of that read.
        if held is None:
            self._read_at = time.time()
        else:
            self._read_at = read_at or epoch_seconds(held.updated_at) or time.time()
        state = held or with_guard_state(self.ctx, self.ctx.store.require(self.cluster))  # a guard's relaunch too
        return runs_of(state, which)


def runs_of(state: ClusterState, which: str | None) -> RunMap | None:
    """The launches of a state the caller holds, and those shown."""
    if not state.runs:
        if which not in (None, "all"):
            raise UsageError(f"cluster '{state.name}' has no recorded run", f"start one with `tpuops launch "
                             f"{state.name}`, or read any logdir with --logdir DIR --run REGEX")
        return None
    return choose([Launch(run.id, run.restart) for run in state.runs], which, state.name)


def run_totals(ctx: Context, name: str | None, logdir: str | None) -> dict[str, int | None]:
    """Each recorded run's step count, as its command line asks for it (`--steps 1000`), for the progress line;
    nothing with --logdir."""
    from tpuops.logs.progress import total_from_command

    if logdir:
        return {}
    state = ctx.store.require(_cluster_name(ctx, name))
    return {run.id: total_from_command(run.command) for run in state.runs}


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


def read_once(source: Pollable, logdir: str, runs: ClusterRuns | None = None) -> list[ScalarPoint]:
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
                  on_error: Callable[[str], None], run_id: str | None = None) -> int:
    """The trainer's own output of the current run on every worker, line by line with the worker's name.

    follow: stream until the run ends everywhere (the launch's `follow`); the exit code is the worst worker's.
    Otherwise: what each worker has written so far; non-zero when a worker could not be read. `run_id` (a run,
    `all`), or a cluster whose workers are gone (preempted, deleted): the output kept in the bucket instead.
    """
    from tpuops.ops.launch import follow as follow_run
    from tpuops.ops.launch import worst_exit_code
    from tpuops.ops.remote import exec_command
    from tpuops.ops.run_output import kept_output

    state = ctx.store.require(_cluster_name(ctx, name))
    if run_id is not None and follow:
        raise UsageError("--workers -f follows the current run on its workers; --run reads the output kept in the "
                         "bucket", "drop -f, or --run")
    if run_id is not None or (not follow and not state.workers and state.runs):
        kept_output(ctx, state, run_id, on_line)
        return 0
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
    if any(result.error for result in results) and bucket_of(state, None) is not None:
        on_error(f"workers out of reach (preempted? deleted?): the output kept in the bucket is shown by "
                 f"`tpuops logs {state.name} --workers --run {run.id}`")
    return code
