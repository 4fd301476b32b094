"""`tpuops run SPEC`: up, launch, follow the workers' output and the TensorBoard scalars until the run ends,
then a summary; with `down=True` everything is torn down afterwards, also after a failure or Ctrl-C (an
interrupted run is stopped first). Ctrl-C raises RunInterrupted, which says what still runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

from tpuops.access.cluster import ClusterAccess, logdir_of, resolve_logdir
from tpuops.context import Context
from tpuops.errors import TpuopsError
from tpuops.logs.events import ScalarPoint
from tpuops.logs.tail import latest_values
from tpuops.ops import down as down_ops
from tpuops.ops import guard as guard_commands
from tpuops.ops import launch as launch_ops
from tpuops.ops import up as up_ops
from tpuops.ops import watch as watch_ops
from tpuops.ops.guard_loop import watch_with_lease
from tpuops.ops.logs import ClusterRuns, LogsRequest, logs_provider, open_source, run_map
from tpuops.ops.specs import check_local_inputs
from tpuops.remote.base import LineHandler, RunResult

SCALAR_POLL_SECONDS = 2.0
CANCEL_JOIN_SECONDS = 10.0  # a cancelled follow thread ends within seconds; a daemon, so never waited forever
Phase = Callable[[str], None]


@dataclass(frozen=True)
class RunSummary:
    cluster: str
    run_id: str | None
    duration: float
    workers: tuple[RunResult, ...] = ()
    last_scalars: dict[tuple[str, str], ScalarPoint] = field(default_factory=dict)
    failed_step: launch_ops.Step | None = None
    torn_down: bool = False
    watched: watch_ops.WatchResult | None = None  # run --watch: how the watch ended

    @property
    def exit_code(self) -> int:
        if self.failed_step is not None or self.run_id is None:
            return 1
        if self.watched is not None:
            return self.watched.exit_code
        return launch_ops.worst_exit_code(self.workers) if self.workers else 0

    def as_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster, "run_id": self.run_id, "duration": round(self.duration, 1),
            "exit_code": self.exit_code, "torn_down": self.torn_down,
            "workers": [r.as_dict() for r in self.workers],
            "failed_step": None if self.failed_step is None else {
                "name": self.failed_step.name, "failures": self.failed_step.failures()},
            "scalars": [{"run": p.run, "tag": p.tag, "step": p.step, "value": p.value}
                        for p in self.last_scalars.values()],
            "watch": None if self.watched is None else self.watched.as_dict(),
        }


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during `run`: what was going on, so the CLI can say what still runs and how to stop it.

    cluster None: interrupted while `up` was creating resources. run_id None: before the trainer started.
    torn_down: `--down` stopped the run and deleted the cluster (the bucket stays).
    """

    def __init__(self, cluster: str | None, run_id: str | None, torn_down: bool,
                 during_up: up_ops.UpInterrupted | None = None) -> None:
        super().__init__(cluster, run_id, torn_down)
        self.cluster, self.run_id, self.torn_down = cluster, run_id, torn_down
        self.during_up = during_up  # what `up` withdrew (a queued resource still waiting) or left behind


class TeardownInterrupted(KeyboardInterrupt):
    """A second Ctrl-C while `run --down` was stopping the run or deleting the cluster."""

    def __init__(self, cluster: str) -> None:
        super().__init__(cluster)
        self.cluster = cluster


def run_spec(ctx: Context, spec_path: str | Path, *, down: bool = False, detach: bool = False,
             wait_for_capacity: float = 0.0, on_line: LineHandler | None = None,
             on_points: Callable[[list[ScalarPoint]], None] | None = None,
             on_phase: Phase | None = None, on_step: launch_ops.StepHandler | None = None,
             watch: watch_ops.WatchOptions | None = None,
             on_event: watch_ops.EventHandler | None = None,
             on_progress: up_ops.Progress | None = None, preflight: bool = False,
             guard: bool | None = None, on_push: launch_ops.ProgressHandler | None = None) -> RunSummary:
    phase = on_phase or (lambda text: None)
    started = time.monotonic()
    cluster: str | None = None
    check_local_inputs(spec_path)  # before `up`: a missing code directory must not cost a TPU
    if preflight:  # before `up`: a finding costs no TPU time
        from tpuops.ops.check import preflight_output, require_clean

        phase("preflight")
        require_clean(spec_path, preflight_output(on_line))
    run_id: str | None = None
    interrupted = False
    during_up: up_ops.UpInterrupted | None = None
    try:
        phase("up")
        result = up_ops.up(ctx, spec_path, wait_for_capacity=wait_for_capacity, progress=on_progress, guard=guard)
        cluster = result.cluster
        scalars = ScalarFollower(ctx, cluster, on_points, result.access)
        scalars.skip_existing()  # what the logdir holds now belongs to earlier runs
        phase("launch")
        report = guard_commands.launch_handed_to_guard(ctx, cluster, launch_ops.LaunchOptions(), on_line=on_line,
                                                       on_step=on_step, on_push=on_push, access=result.access)
        run_id = report.run_id
        if not report.ok:
            failed = next(step for step in report.steps if not step.ok)
            return RunSummary(cluster, None, time.monotonic() - started, failed_step=failed, torn_down=down)
        if detach:
            return RunSummary(cluster, report.run_id, time.monotonic() - started)
        if watch is not None:  # watch (and recover) instead of following: `tpuops logs -f` shows the output
            phase("watch")
            watched = watch_with_lease(ctx, cluster, replace(watch, down=False), on_event=on_event)  # --down: ours
            down = down and not watched.keep_tpu  # the watchdog kept a hung run's TPU for the user
            return RunSummary(cluster, watched.run_id, time.monotonic() - started, torn_down=down, watched=watched)
        phase("follow")
        workers = _follow_run(ctx, cluster, report.run_id, on_line, scalars)
        return RunSummary(cluster, report.run_id, time.monotonic() - started, workers,
                          latest_values(scalars.points), torn_down=down)
    except launch_ops.RunInProgress:
        down = False  # the cluster runs another launch's run: `--down` must not delete it under that run
        raise
    except TpuopsError as err:
        if cluster is not None and not down:  # say what stays up, billing, and how to remove it
            err.hint = "; ".join(filter(None, [err.hint, still_up(cluster)]))
        raise
    except KeyboardInterrupt as interrupt:
        interrupted = True
        during_up = interrupt if isinstance(interrupt, up_ops.UpInterrupted) else None
        raise
    finally:
        if down and cluster is not None:
            _tear_down(ctx, cluster, run_id if interrupted else None, phase, on_progress)
        if interrupted:  # raised from the `finally`, after the teardown: the CLI says what happened
            raise RunInterrupted(cluster, run_id, torn_down=down and cluster is not None,
                                 during_up=during_up) from None


def still_up(cluster: str) -> str:
    return (f"the cluster {cluster} is still up (a TPU bills until deleted): `tpuops launch {cluster}` tries "
            f"again, `tpuops down {cluster}` deletes it")


def _tear_down(ctx: Context, cluster: str, stop_run: str | None, phase: Phase,
               progress: up_ops.Progress | None) -> None:
    """`--down`: stop the run first when it may still be going (it was interrupted), then delete the cluster."""
    try:
        if stop_run is not None:
            phase("stop")
            with suppress(TpuopsError):  # deleting the TPU below stops it as surely; `down` closes its record
                launch_ops.stop(ctx, cluster, stop_run)
        phase("down")
        plan, cloud = down_ops.find(ctx, cluster, delete_bucket=False)
        down_ops.execute(ctx, plan, cloud, progress=progress)
    except KeyboardInterrupt:
        raise TeardownInterrupted(cluster) from None


def _follow_run(ctx: Context, cluster: str, run_id: str | None, on_line: LineHandler | None,
                scalars: ScalarFollower) -> tuple[RunResult, ...]:
    """The workers' output (one thread) and the scalars (this thread) until every worker's trainer ended.

    Ctrl-C lands in this thread: the follow thread is cancelled (the workers' `tail`s signalled), and
    FollowInterrupted goes up; the run itself goes on."""
    outcome: list[launch_ops.Step] = []
    errors: list[BaseException] = []
    cancel = threading.Event()

    def follow_workers() -> None:
        try:
            outcome.append(launch_ops.follow(ctx, cluster, run_id, on_line=on_line, cancel=cancel))
        except BaseException as err:  # noqa: BLE001  re-raised in the caller's thread
            errors.append(err)

    thread = threading.Thread(target=follow_workers, name="tpuops-follow", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            scalars.poll()
            thread.join(timeout=SCALAR_POLL_SECONDS)
    except KeyboardInterrupt:
        cancel.set()
        thread.join(timeout=CANCEL_JOIN_SECONDS)
        raise launch_ops.FollowInterrupted(cluster, run_id or "") from None
    scalars.poll()  # what the trainer wrote last
    if errors:
        raise errors[0]
    return outcome[0].results


class ScalarFollower:
    """Polls the cluster's TensorBoard logdir; silent until the trainer has created it.

    A run shows only its own scalars: `skip_existing()` before the launch reads (and drops) what earlier
    runs left in the same logdir, so only points written after that count. This needs no clock shared
    with the workers, and an event file an earlier run left is never read twice (the tail is incremental).
    """

    def __init__(self, ctx: Context, cluster: str, on_points: Callable[[list[ScalarPoint]], None] | None,
                 access: ClusterAccess | None = None) -> None:
        self.ctx, self.cluster, self.on_points, self.access = ctx, cluster, on_points, access
        self.points: list[ScalarPoint] = []
        self._source = None

    def skip_existing(self) -> None:
        self._read()

    def poll(self) -> None:
        new = self._read()
        self.points.extend(new)
        if new and self.on_points:
            self.on_points(new)

    def _read(self) -> list[ScalarPoint]:
        try:
            if self._source is None:
                self._source = open_source(self.ctx, logs_request(self.ctx, self.cluster, self.access),
                                           warn=lambda text: None)
            return self._source.poll()
        except TpuopsError:
            return []  # no logdir yet (everything later is new), or a passing error: the next poll tries again


def logs_request(ctx: Context, cluster: str, access: ClusterAccess | None = None) -> LogsRequest:
    """The logs of the run just launched, not earlier ones: from the access the caller holds (`run` after `up`:
    the state and spec up saved), else read by name."""
    if access is not None and access.spec is not None:
        return LogsRequest(logdir=logdir_of(access.state, access.spec), provider=access.provider,
                           runs=ClusterRuns(ctx, cluster, None, held=access.state))
    return LogsRequest(logdir=resolve_logdir(ctx, cluster, None), provider=logs_provider(ctx, cluster, None),
                       runs=run_map(ctx, cluster, None, None))  # the current run: the launch's own once recorded
