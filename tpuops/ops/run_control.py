"""A run once it exists: each worker's state of it, stop, follow, and the run's record in the cluster's state.

On the workers a run is its directory `~/tpuops/NAME/runs/RUN_ID/` and its processes (the setup, then the
trainer, and whatever they start: `shipped/run_scope.sh`); the host side is in `shipped/*.sh`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tpuops.access.cluster import ClusterAccess, cluster_access, make_runners, tpu_paths
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.remote.base import LineHandler, Runner, RunResult
from tpuops.remote.fanout import run_each
from tpuops.shipped import script_command
from tpuops.spec import Spec
from tpuops.state import ClusterState, RunRecord

STOP_GRACE_SECONDS = 10
UNREACHABLE = "unreachable"
# A worker's run in these states is going on: a new launch must not start beside it.
LIVE_STATES = ("running", "setup", "starting")


class FollowInterrupted(KeyboardInterrupt):
    """Ctrl-C while following a run: following stopped (the remote `tail`s were signalled), the run goes on."""

    def __init__(self, cluster: str, run_id: str) -> None:
        super().__init__(cluster, run_id)
        self.cluster, self.run_id = cluster, run_id


@dataclass(frozen=True)
class Step:
    """One phase of a launch (connect, push, setup, free-tpu, start, stop, follow) and what each worker said."""

    name: str
    results: tuple[RunResult, ...]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def failures(self) -> list[str]:
        return [r.error or f"{r.worker}: exit {r.exit_code}" for r in self.results if not r.ok]


StepHandler = Callable[[Step], None]


# ------------------------------------------------------------------------------------------- states


@dataclass(frozen=True)
class WorkerRun:
    """One worker's answer about a run: its state (running, setup, starting, exited N, setup failed N,
    killed, lost, none, unreachable) and the run's id there."""

    result: RunResult
    state: str
    run_id: str | None


def worker_runs(runners: Sequence[Runner], cluster: str, run_id: str | None, max_parallel: int) -> list[WorkerRun]:
    """Each worker's state of the run (without an id: of the worker's current run)."""
    args = [cluster] + ([run_id] if run_id else [])
    results = run_each(runners, lambda r: r.run(script_command("status", *args), capture=True), max_parallel)
    return [_parse_status(r) for r in results]


def status_lines(runners: Sequence[Runner], cluster: str, run_id: str | None, max_parallel: int) -> dict[str, str]:
    return {w.result.worker: w.state for w in worker_runs(runners, cluster, run_id, max_parallel)}


def _parse_status(result: RunResult) -> WorkerRun:
    if not result.ok:
        return WorkerRun(result, UNREACHABLE, None)
    words = result.stdout.decode().split()
    if not words or words[0] == "none":
        return WorkerRun(result, "none", None)
    state = words[1] if len(words) > 1 else "lost"
    if state == "exited":
        state = " ".join(words[1:3])
    elif state == "setup-failed":
        state = f"setup failed {words[2] if len(words) > 2 else '?'}"
    return WorkerRun(result, state, words[0])


# ---------------------------------------------------------------------------------------------- stop


def stop_step(cluster: str, run_id: str | None, runners: Sequence[Runner], max_parallel: int) -> Step:
    """Stop a run on the given workers; without a run id, whatever run each worker has as its current one.
    Every worker's run is marked stopped before any is signalled (a peer's death ends a multi-host trainer too)."""
    mark = script_command("stop", cluster, run_id or "", str(STOP_GRACE_SECONDS), "mark")
    run_each(runners, lambda r: r.run(mark, capture=True, timeout=60), max_parallel)
    argv = script_command("stop", cluster, run_id or "", str(STOP_GRACE_SECONDS))
    return Step("stop", tuple(run_each(runners, lambda r: r.run(argv, capture=True), max_parallel)))


def free_tpu_step(access: ClusterAccess, runners: Sequence[Runner], spec: Spec, max_parallel: int,
                  on_line: LineHandler | None) -> Step:
    glob, lockfile = tpu_paths(access, spec)
    argv = script_command("free_tpu", glob, lockfile, str(STOP_GRACE_SECONDS))
    return Step("free-tpu", tuple(run_each(runners, lambda r: r.run(argv, on_line=on_line), max_parallel)))


def recorded_run(access: ClusterAccess, run_id: str | None) -> RunRecord:
    run = access.state.run(run_id)
    if run is None:
        what = f"run {run_id}" if run_id else "run"
        raise UsageError(f"no {what} recorded for '{access.state.name}'", "see `tpuops status`")
    return run


@dataclass(frozen=True)
class StopReport:
    cluster: str
    run_id: str
    steps: tuple[Step, ...]
    worker_states: Mapping[str, str]

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps) and not any(v in LIVE_STATES for v in self.worker_states.values())

    def said(self) -> dict[str, str]:
        """What each worker's stop said (`killed setup of run ...`), by worker."""
        return {r.worker: r.stdout.decode("utf-8", "replace").strip().splitlines()[-1]
                for step in self.steps if step.name == "stop" for r in step.results if r.stdout.strip()}

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "run_id": self.run_id, "ok": self.ok, "workers": dict(self.worker_states)}


def stop(ctx: Context, name: str | None, run_id: str | None = None, max_parallel: int = 32) -> StopReport:
    """TERM every process of the run (setup or trainer, and what they started) everywhere, KILL what is left
    after a grace period and wait for it to be gone, free the TPU, record the end."""
    access = cluster_access(ctx, name, need_spec=False)
    runners = make_runners(access, access.workers)
    try:
        run = recorded_run(access, run_id)
        steps = [stop_step(access.state.name, run.id, runners, max_parallel)]
        if access.spec is not None:
            steps.append(free_tpu_step(access, runners, access.spec, max_parallel, None))
        states = status_lines(runners, access.state.name, run.id, max_parallel)
    finally:
        for runner in runners:
            runner.close()
    update_run(ctx, access.state.name, run.id, states)
    return StopReport(access.state.name, run.id, tuple(steps), states)


# -------------------------------------------------------------------------------------------- follow


def follow(ctx: Context, name: str | None, run_id: str | None = None, *, on_line: LineHandler | None = None,
           max_parallel: int = 32, cancel: threading.Event | None = None) -> Step:
    """Stream every worker's output of the run until it ends there; each result carries that exit code.

    Ctrl-C (or `cancel`, set from another thread) stops following at once and raises FollowInterrupted
    (or fanout.Cancelled); the run itself goes on.
    """
    access = cluster_access(ctx, name, need_spec=False)
    run = recorded_run(access, run_id)
    runners = make_runners(access, access.workers)
    try:
        argv = script_command("follow", access.state.name, run.id, "1")
        try:
            results = tuple(run_each(runners, lambda r: r.run(argv, on_line=on_line), max_parallel, cancel))
        except KeyboardInterrupt:
            raise FollowInterrupted(access.state.name, run.id) from None
        states = status_lines(runners, access.state.name, run.id, max_parallel)
    finally:
        for runner in runners:
            runner.close()
    update_run(ctx, access.state.name, run.id, states)
    return Step("follow", results)


def follow_and_wait(ctx: Context, name: str | None, run_id: str | None = None, *,
                    on_line: LineHandler | None = None) -> int:
    """Follow the run to its end on every worker; the worst worker's exit code."""
    return worst_exit_code(follow(ctx, name, run_id, on_line=on_line).results)


def run_states(ctx: Context, name: str | None, max_parallel: int = 32,
               connect_timeout: float | None = None) -> dict[str, str]:
    """Each worker's state of the current run: setup, starting, running, exited N, setup failed N, killed,
    lost (or unreachable)."""
    return states_of_run(ctx, cluster_access(ctx, name, need_spec=False), max_parallel, connect_timeout)


def states_of_run(ctx: Context, access: ClusterAccess, max_parallel: int = 32,
                  connect_timeout: float | None = None) -> dict[str, str]:
    """`run_states` for a caller that holds the cluster's access (`status`); recorded with the run."""
    run = access.state.current_run
    if run is None:
        return {}
    extra = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    runners = make_runners(access, access.workers, **extra)
    try:
        states = status_lines(runners, access.state.name, run.id, max_parallel)
    finally:
        for runner in runners:
            runner.close()
    update_run(ctx, access.state.name, run.id, states)
    return states


def worst_exit_code(results: Sequence[RunResult]) -> int:
    """0 when every worker exited 0; else the largest failure (a worker without an exit code counts as 255)."""
    codes = [255 if r.exit_code is None else r.exit_code for r in results]
    return max(codes, default=255)


# ------------------------------------------------------------------------------------------- records


def record_run(ctx: Context, cluster: str, run: RunRecord) -> ClusterState:
    """The state with the run appended, as saved (for the caller to hand on)."""
    state = ctx.store.require(cluster)  # re-read: another command may have written meanwhile
    state.runs.append(run)
    state.log("launch", f"run {run.id} started on {len(run.workers)} worker(s): {run.command}")
    ctx.store.save(state)
    return state


def update_run(ctx: Context, cluster: str, run_id: str, states: Mapping[str, str]) -> None:
    state = ctx.store.load(cluster)
    run = state.run(run_id) if state else None
    if state is None or run is None:
        return
    run.worker_states.update({w: s for w, s in states.items() if s not in (UNREACHABLE, "none")})
    ctx.store.remember(state)  # what status observed: a full disk must not fail it
