"""Start the trainer on every worker of a cluster (`launch`).

One launch at a time per cluster: the launch lock on worker 0 (`remote/launch_lock.py`) is held from the check
that nothing runs until the new run is recorded. Then: push, run `trainer.setup` once per distinct text (the
first part of the run: its output streams here, `status` shows it, `stop` ends it), free the TPU from stale
holders, and start the command detached on all workers at once (own session, pid file and log under
`~/tpuops/NAME/runs/RUN_ID/`), with the environment each framework needs (`ops/trainer_env.py`). The run
outlives the SSH connections; `follow` reattaches to it, `stop` ends it (`ops/run_control.py`). The host side
is in `shipped/*.sh`.
"""

from __future__ import annotations

import getpass
import hashlib
import secrets
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from tpuops.access.cluster import ClusterAccess, cluster_access, make_runners
from tpuops.autostop.remote import AgentInstall
from tpuops.context import Context
from tpuops.errors import TpuopsError, UsageError
from tpuops.ops import autostop as cost_guard
from tpuops.ops.push import push_to
from tpuops.ops.run_control import (  # noqa: F401  (also the run's other commands, where callers find them)
    UNREACHABLE,
    FollowInterrupted,
    Step,
    StepHandler,
    StopReport,
    WorkerRun,
    follow,
    follow_and_wait,
    free_tpu_step,
    record_run,
    run_states,
    status_lines,
    stop,
    stop_step,
    update_run,
    worker_runs,
    worst_exit_code,
)
from tpuops.ops.run_output import keep_output
from tpuops.ops.trainer_env import localize, trainer_envs
from tpuops.remote.base import Command, LineHandler, Runner, RunResult, command_text
from tpuops.remote.fanout import run_each
from tpuops.remote.launch_lock import LaunchLock, LockBusy, LockOwner
from tpuops.remote.push_results import ProgressHandler
from tpuops.shipped import script_command
from tpuops.state import RunRecord
from tpuops.watchdog.launch_hooks import install_tools

LOCK_WAIT_SECONDS = 900.0  # --replace: how long to wait for another launch to finish starting its run
SETUP_STOPPED_EXIT = 143  # setup.sh / start.sh: the run was stopped (`tpuops stop`) before its trainer started


class RunInProgress(TpuopsError):
    pass


@dataclass(frozen=True)
class LaunchOptions:
    command: Command | None = None  # default: trainer.command; an argv arrives as given, a str is a shell line
    force_setup: bool = False
    replace: bool = False
    push_data: bool = True
    preflight: bool = False  # `tpuops check` the spec first; stop before any cloud work on a finding
    restart: int = 0  # `watch` relaunches with TPUOPS_RESTART=n and TPUOPS_RESUME=1
    max_parallel: int = 32


@dataclass(frozen=True)
class LaunchReport:
    cluster: str
    run_id: str | None
    steps: tuple[Step, ...] = field(default_factory=tuple)
    autostop: AgentInstall | None = None  # the cost guard refreshed on worker 0 (None: autostop is off)
    guard_trouble: str | None = None  # the guard VM could not be handed the new run (ops/guard.py)

    @property
    def ok(self) -> bool:
        return self.run_id is not None and all(step.ok for step in self.steps)

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "run_id": self.run_id, "ok": self.ok,
                "steps": [{"name": s.name, "workers": [r.as_dict() for r in s.results]} for s in self.steps],
                "autostop": asdict(self.autostop) if self.autostop else None, "guard_trouble": self.guard_trouble}


# -------------------------------------------------------------------------------------------- launch


def launch_run(ctx: Context, name: str | None, options: LaunchOptions = LaunchOptions(), *,
               on_line: LineHandler | None = None, on_step: StepHandler | None = None,
               on_push: ProgressHandler | None = None, access: ClusterAccess | None = None) -> LaunchReport:
    """Push, setup, free the TPU, start detached everywhere; returns as soon as every worker has started.
    `access`: the cluster as the caller holds it (`run` after `up`), else read here by name."""
    if access is None:
        access = cluster_access(ctx, name, need_spec=True)
    spec = access.spec
    assert spec is not None
    if options.preflight:
        from tpuops.ops.check import preflight_output, require_clean

        require_clean(access.state.spec_path, preflight_output(on_line))
    if spec.trainer is None and options.command is None:
        raise UsageError(f"the spec of '{access.state.name}' has no trainer", "add trainer: {framework, command}")
    run_id = new_run_id()
    runners = make_runners(access, access.workers)
    try:
        lock = LaunchLock(runners[0], access.state.name, run_id, launcher_name(),
                          wait=LOCK_WAIT_SECONDS if options.replace else 0.0,
                          on_waiting=lambda owner: _say_waiting(runners[0].name, owner, on_line))
        try:
            last = lock.acquire()
        except LockBusy as busy:
            raise _launching_elsewhere(access.state.name, busy.owner, waited=options.replace) from None
        try:
            return _Launch(ctx, access, options, runners, run_id, on_line, on_step, on_push).run(last)
        finally:
            lock.release()  # the run is recorded (or the launch gave up): the next launch may look
    finally:
        for runner in runners:
            runner.close()


class _Launch:
    """One launch under the lock: each phase records its Step, the first failure ends it."""

    def __init__(self, ctx: Context, access: ClusterAccess, options: LaunchOptions, runners: Sequence[Runner],
                 run_id: str, on_line: LineHandler | None, on_step: StepHandler | None,
                 on_push: ProgressHandler | None = None) -> None:
        self.ctx, self.access, self.options, self.runners = ctx, access, options, runners
        self.run_id, self.on_line, self.on_step, self.on_push = run_id, on_line, on_step, on_push
        self.cluster = access.state.name
        self.steps: list[Step] = []

    def record(self, step: Step) -> Step:
        self.steps.append(step)
        if self.on_step:
            self.on_step(step)
        return step

    def failed(self) -> LaunchReport:
        return LaunchReport(self.cluster, None, tuple(self.steps))

    def run(self, last: LockOwner | None) -> LaunchReport:
        spec, options, cluster = self.access.spec, self.options, self.cluster
        assert spec is not None
        answers = worker_runs(self.runners, cluster, None, options.max_parallel)
        if any(a.state == UNREACHABLE for a in answers):
            # A trainer cannot start without every worker: say so now, once per worker, not after the push.
            self.record(Step("connect", tuple(a.result for a in answers)))
            return self.failed()
        live = [a for a in answers if a.state in ("running", "setup")]
        if live and not options.replace:
            raise _still_going(cluster, live, last)
        if not self.record(_push(self.ctx, self.access, self.runners, options, self.on_push)).ok:
            return self.failed()
        if live:
            self.record(stop_step(cluster, None, self.runners, options.max_parallel))
        command = command_text(options.command) if options.command else (spec.trainer.command if spec.trainer else "")
        setup = spec.trainer.setup if spec.trainer else None
        recorded = record_run(self.ctx, cluster, RunRecord(
            id=self.run_id, command=command, workers=[r.name for r in self.runners], restart=options.restart,
            worker_states={r.name: "setup" if setup else "starting" for r in self.runners}))
        if setup and not self.record(self.setup(setup)).ok:
            update_run(self.ctx, cluster, self.run_id,
                       status_lines(self.runners, cluster, self.run_id, options.max_parallel))
            return self.failed()
        self.record(free_tpu_step(self.access, self.runners, spec, options.max_parallel, self.on_line))
        envs = trainer_envs(self.ctx, self.access, spec, self.run_id, options.restart)
        started = self.record(Step("start", tuple(run_each(
            self.runners, lambda r: r.run(script_command("start", cluster, self.run_id,
                                                         localize(self.access, command)), env=envs[r.name]),
            options.max_parallel))))
        update_run(self.ctx, cluster, self.run_id, {r.worker: "running" if r.ok else "lost" for r in started.results})
        if not started.ok:
            # A multi-host trainer waits forever for a missing peer: stop the part that did start.
            self.record(stop_step(cluster, self.run_id, self.runners, options.max_parallel))
            return self.failed()
        install_tools(self.runners, cluster, spec, self.ctx.env, options.max_parallel)  # the watchdog's py-spy
        keep_output(self.ctx, self.access, self.runners, recorded.runs, self.run_id, options.max_parallel)
        return LaunchReport(cluster, self.run_id, tuple(self.steps),
                            cost_guard.install(self.ctx, self.access, self.runners[0]))

    def setup(self, setup: str) -> Step:
        """trainer.setup on every worker, as the run's first part; a worker's result says when `stop` ended it."""
        ids = {w.name: str(i) for i, w in enumerate(self.access.workers)}
        force = "1" if self.options.force_setup else "0"

        def one(runner: Runner) -> RunResult:
            result = runner.run(script_command("setup", self.cluster, self.run_id, ids[runner.name],
                                               setup_hash(setup), force, setup), on_line=self.on_line)
            if result.exit_code == SETUP_STOPPED_EXIT:
                return RunResult(result.worker, result.exit_code, result.duration,
                                 f"{result.worker}: setup stopped by `tpuops stop`; the trainer was not started")
            return result

        return Step("setup", tuple(run_each(self.runners, one, self.options.max_parallel)))


def _push(ctx: Context, access: ClusterAccess, runners: Sequence[Runner], options: LaunchOptions,
          on_push: ProgressHandler | None) -> Step:
    """Over the launch's own connections: one result per worker (however many trees went to it) and one per
    upload."""
    report = push_to(ctx, access, runners=runners, data=options.push_data, max_parallel=options.max_parallel,
                     on_progress=on_push)
    by_worker: dict[str, list] = {}
    for tree in report.trees:
        for pushed in tree.workers:
            by_worker.setdefault(pushed.worker, []).append(pushed)
    results = [RunResult(worker, 0 if all(p.ok for p in pushes) else None, sum(p.duration for p in pushes),
                         "; ".join(dict.fromkeys(p.error for p in pushes if p.error)) or None,
                         bytes_sent=sum(p.bytes_sent for p in pushes))
               for worker, pushes in by_worker.items()]
    results += [RunResult(f"upload {u.url}", 0 if u.ok else None, 0.0, u.error) for u in report.uploads]
    return Step("push", tuple(results))


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def run_id_time(run_id: str) -> str | None:
    """When a run was launched, read from its id (see new_run_id)."""
    try:
        return datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return None


def setup_hash(setup: str) -> str:
    return hashlib.sha256(setup.encode()).hexdigest()


def launcher_name() -> str:
    """Who launches, as the lock records it: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


# -------------------------------------------------------------------------------------------- refusals


def _still_going(cluster: str, live: Sequence[WorkerRun], last: LockOwner | None) -> RunInProgress:
    run_id = live[0].run_id or "?"
    since = last.when() if last is not None and last.run_id == run_id else run_id_time(run_id)
    origin = f" from {last.origin}" if last is not None and last.run_id == run_id else ""
    doing = "running" if live[0].state == "running" else "in setup"
    workers = ", ".join(a.result.worker for a in live)
    return RunInProgress(f"run {run_id} of '{cluster}' is still {doing} on {workers} (launched "
                         f"{since or 'at an unknown time'}{origin})",
                         f"stop it with `tpuops stop {cluster}`, or pass --replace to stop it and start anew")


def _launching_elsewhere(cluster: str, owner: LockOwner | None, waited: bool) -> RunInProgress:
    what = (f"run {owner.run_id} of '{cluster}' is being launched right now (since {owner.when()}, from "
            f"{owner.origin})") if owner else f"another launch of '{cluster}' is starting a run right now"
    if waited:
        return RunInProgress(f"{what}, still after {LOCK_WAIT_SECONDS / 60:.0f} min of waiting",
                             f"see `tpuops status {cluster}`; try again once it has started")
    return RunInProgress(what, f"wait for it, then `tpuops stop {cluster}`; or pass --replace to wait for it "
                               "to start and then replace it")


def _say_waiting(worker: str, owner: LockOwner | None, on_line: LineHandler | None) -> None:
    if on_line is None:
        return
    what = f"run {owner.run_id} (launched since {owner.when()} from {owner.origin})" if owner else "another launch"
    on_line(worker, "stderr", f"tpuops: waiting for {what} to start; --replace then stops it")
