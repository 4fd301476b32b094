"""Start, follow and stop the trainer on every worker of a cluster.

`launch`: push, run `trainer.setup` once per distinct text, free the TPU from stale holders, then start the
command detached on all workers at once (own session and process group, pid file and log under
`~/tpuops/NAME/runs/RUN_ID/`), with the environment each framework needs. The run outlives the SSH
connections; `follow` reattaches to it, `stop` ends it. The host side is in `remote/scripts/*.sh`.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from tpuops.cloud.provider import TrainerSite
from tpuops.context import Context
from tpuops.errors import TpuopsError, UsageError
from tpuops.ops import cost_guard
from tpuops.ops.autostop import record_prefix
from tpuops.ops.remote import ClusterAccess, cluster_access, make_runners, push, tpu_paths
from tpuops.remote.autostop import AgentInstall
from tpuops.remote.base import LineHandler, Runner, RunResult
from tpuops.remote.fanout import run_each
from tpuops.remote.scripts import script_command
from tpuops.remote.sync import ProgressHandler
from tpuops.spec import Spec
from tpuops.state import RunRecord, WorkerRecord, bucket_of

JAX_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
# Multislice: the port the slices' runtimes meet on (the one Google's and xpk's examples use), and the variable
# start.sh reads settings from that only fill gaps in the worker's own environment.
MEGASCALE_PORT = 8080
HOST_DEFAULTS_ENV = "TPUOPS_HOST_DEFAULTS"

STOP_GRACE_SECONDS = 10


class RunInProgress(TpuopsError):
    pass


class FollowInterrupted(KeyboardInterrupt):
    """Ctrl-C while following a run: following stopped (the remote `tail`s were signalled), the run goes on."""

    def __init__(self, cluster: str, run_id: str) -> None:
        super().__init__(cluster, run_id)
        self.cluster, self.run_id = cluster, run_id


@dataclass(frozen=True)
class LaunchOptions:
    command: str | None = None  # default: trainer.command
    force_setup: bool = False
    replace: bool = False
    push_data: bool = True
    preflight: bool = False  # `tpuops check` the spec first; stop before any cloud work on a finding
    restart: int = 0  # `watch` relaunches with TPUOPS_RESTART=n and TPUOPS_RESUME=1
    max_parallel: int = 32


@dataclass(frozen=True)
class Step:
    """One phase of a launch (setup, free-tpu, start, stop, follow) and what each worker said."""

    name: str
    results: tuple[RunResult, ...]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def failures(self) -> list[str]:
        return [r.error or f"{r.worker}: exit {r.exit_code}" for r in self.results if not r.ok]


@dataclass(frozen=True)
class LaunchReport:
    cluster: str
    run_id: str | None
    steps: tuple[Step, ...] = field(default_factory=tuple)
    autostop: AgentInstall | None = None  # the cost guard refreshed on worker 0 (None: autostop is off)

    @property
    def ok(self) -> bool:
        return self.run_id is not None and all(step.ok for step in self.steps)

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "run_id": self.run_id, "ok": self.ok,
                "steps": [{"name": s.name, "workers": [r.as_dict() for r in s.results]} for s in self.steps],
                "autostop": asdict(self.autostop) if self.autostop else None}


StepHandler = Callable[[Step], None]


# -------------------------------------------------------------------------------------------- launch


def launch_run(ctx: Context, name: str | None, options: LaunchOptions = LaunchOptions(), *,
               on_line: LineHandler | None = None, on_step: StepHandler | None = None,
               on_push: ProgressHandler | None = None) -> LaunchReport:
    """Push, setup, free the TPU, start detached everywhere; returns as soon as every worker has started."""
    access = cluster_access(ctx, name, need_spec=True)
    spec = access.spec
    assert spec is not None
    if options.preflight:
        from tpuops.ops.check import require_clean

        require_clean(access.state.spec_path)
    if spec.trainer is None and options.command is None:
        raise UsageError(f"the spec of '{access.state.name}' has no trainer", "add trainer: {framework, command}")
    steps: list[Step] = []

    def record(step: Step) -> Step:
        steps.append(step)
        if on_step:
            on_step(step)
        return step

    runners = make_runners(access, access.workers)
    try:
        running = _running_workers(runners, access.state.name, options.max_parallel)
        if running and not options.replace:
            raise RunInProgress(f"a run of '{access.state.name}' is still running on {', '.join(running)}",
                                "stop it with `tpuops stop`, or pass --replace")
        if not record(_push(ctx, access, options, on_push)).ok:
            return LaunchReport(access.state.name, None, tuple(steps))
        if running:
            record(_stop_run(access.state.name, None, runners, options.max_parallel))
        if spec.trainer and spec.trainer.setup:
            setup = record(_setup(access, runners, spec.trainer.setup, options, on_line))
            if not setup.ok:
                return LaunchReport(access.state.name, None, tuple(steps))
        record(_free_tpu(ctx, access, runners, spec, options.max_parallel, on_line))
        run_id = new_run_id()
        command = options.command or (spec.trainer.command if spec.trainer else "")
        envs = trainer_envs(ctx, access, spec, run_id, options)
        started = record(Step("start", tuple(run_each(
            runners, lambda r: r.run(script_command("start", access.state.name, run_id,
                                                    _localize(access, command)), env=envs[r.name]),
            options.max_parallel))))
        _record_run(ctx, access, RunRecord(id=run_id, command=command, workers=[r.name for r in runners],
                                           restart=options.restart,
                                           worker_states={r.worker: "running" if r.ok else "lost"
                                                          for r in started.results}))
        if not started.ok:
            # A multi-host trainer waits forever for a missing peer: stop the part that did start.
            record(_stop_run(access.state.name, run_id, runners, options.max_parallel))
            return LaunchReport(access.state.name, None, tuple(steps))
        return LaunchReport(access.state.name, run_id, tuple(steps), cost_guard.install(ctx, access.state.name))
    finally:
        for runner in runners:
            runner.close()


def _push(ctx: Context, access: ClusterAccess, options: LaunchOptions, on_push: ProgressHandler | None) -> Step:
    report = push(ctx, access.state.name, data=options.push_data, max_parallel=options.max_parallel,
                  on_progress=on_push)
    results = [RunResult(w.worker, 0 if w.ok else None, w.duration, w.error, bytes_sent=w.bytes_sent)
               for tree in report.trees for w in tree.workers]
    results += [RunResult(f"upload {u.url}", 0 if u.ok else None, 0.0, u.error) for u in report.uploads]
    return Step("push", tuple(results))


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def setup_hash(setup: str) -> str:
    return hashlib.sha256(setup.encode()).hexdigest()


def _setup(access: ClusterAccess, runners: Sequence[Runner], setup: str, options: LaunchOptions,
           on_line: LineHandler | None) -> Step:
    argv = script_command("setup", access.state.name, setup_hash(setup), "1" if options.force_setup else "0", setup)
    return Step("setup", tuple(run_each(runners, lambda r: r.run(argv, on_line=on_line), options.max_parallel)))


def _free_tpu(ctx: Context, access: ClusterAccess, runners: Sequence[Runner], spec: Spec, max_parallel: int,
              on_line: LineHandler | None) -> Step:
    glob, lockfile = tpu_paths(access, spec)
    argv = script_command("free_tpu", glob, lockfile, str(STOP_GRACE_SECONDS))
    return Step("free-tpu", tuple(run_each(runners, lambda r: r.run(argv, on_line=on_line), max_parallel)))


# -------------------------------------------------------------------------------------------- environment


def trainer_envs(ctx: Context, access: ClusterAccess, spec: Spec, run_id: str,
                 options: LaunchOptions) -> dict[str, dict[str, str]]:
    """The environment of every worker's trainer, by worker name."""
    workers = access.workers
    coordinator = access.provider.coordinator(workers[0].internal_ip)
    logdir = _localize(access, spec.logs.tensorboard or "")
    common = {
        "TPUOPS_CLUSTER": access.state.name,
        "TPUOPS_RUN_ID": run_id,
        "TPUOPS_NUM_WORKERS": str(len(workers)),
        "TPUOPS_COORDINATOR": coordinator,
        "TPUOPS_LOGDIR": logdir,
        **framework_env(access, spec),
    }
    if options.restart:
        common |= {"TPUOPS_RESTART": str(options.restart), "TPUOPS_RESUME": "1"}
    user_env = {key: _localize(access, value) for key, value in (spec.trainer.env if spec.trainer else {}).items()}
    common |= compilation_cache_env(ctx, access, spec, user_env)
    return {w.name: {**user_env, **common, "TPUOPS_WORKER_ID": str(i), **slice_env(w, workers, user_env)}
            for i, w in enumerate(workers)}


def slice_env(worker: WorkerRecord, workers: Sequence[WorkerRecord], user_env: Mapping[str, str]) -> dict[str, str]:
    """Which slice a worker is in, and with Multislice the MEGASCALE_* settings the TPU runtime joins the
    slices by (coordinator on slice 0's worker 0). Those are defaults: a value the worker's own environment
    already has (the TPU runtime's) or trainer.env sets wins."""
    slices = 1 + max(w.slice for w in workers)
    mates = [w for w in workers if w.slice == worker.slice]
    env = {"TPUOPS_SLICE_ID": str(worker.slice), "TPUOPS_NUM_SLICES": str(slices),
           "TPUOPS_SLICE_WORKER_ID": str(mates.index(worker)), "TPUOPS_SLICE_NUM_WORKERS": str(len(mates))}
    if slices == 1:
        return env
    megascale = {"MEGASCALE_COORDINATOR_ADDRESS": workers[0].internal_ip, "MEGASCALE_NUM_SLICES": str(slices),
                 "MEGASCALE_SLICE_ID": str(worker.slice), "MEGASCALE_PORT": str(MEGASCALE_PORT)}
    defaults = " ".join(f"{name}={value}" for name, value in megascale.items() if name not in user_env)
    return env | {HOST_DEFAULTS_ENV: defaults}


def compilation_cache_env(ctx: Context, access: ClusterAccess, spec: Spec,
                          user_env: Mapping[str, str]) -> dict[str, str]:
    """JAX's persistent compilation cache in the run's bucket: a restart after preemption or autostop reuses
    the compiled step instead of paying for the compilation again (unless trainer.env sets it)."""
    framework = spec.trainer.framework if spec.trainer else None
    bucket = bucket_of(access.state, spec)
    if framework != "jax" or not bucket or JAX_CACHE_ENV in user_env:
        return {}
    cache = f"{record_prefix(bucket, access.state.name)}/{cost_guard.JAX_CACHE_DIR}"
    return {JAX_CACHE_ENV: _localize(access, cache)}


def framework_env(access: ClusterAccess, spec: Spec) -> dict[str, str]:
    """What each framework needs to find the TPU (the provider knows: TPU_NAME and XRT for a legacy Node,
    PJRT on a TPU VM, the CPU on the local simulator)."""
    tpu = access.state.tpu_record()
    site = TrainerSite(access.state.name, spec.trainer.framework if spec.trainer else None, spec.tpu.mode,
                       tuple(tpu.node_ips) if tpu else ())
    return access.provider.framework_env(site)


def _localize(access: ClusterAccess, text: str) -> str:
    """The text as the workers must see it (the local provider's gs://BUCKET is a directory)."""
    buckets = [access.spec.bucket.name] if access.spec is not None and access.spec.bucket else []
    return access.provider.localize(text, buckets)


# ------------------------------------------------------------------------------------ running, stop, follow


def _status_lines(runners: Sequence[Runner], cluster: str, run_id: str | None, max_parallel: int) -> dict[str, str]:
    args = [cluster] + ([run_id] if run_id else [])
    results = run_each(runners, lambda r: r.run(script_command("status", *args), capture=True), max_parallel)
    return {r.worker: _parse_status(r) for r in results}


def _parse_status(result: RunResult) -> str:
    if not result.ok:
        return "unreachable"
    words = result.stdout.decode().split()
    if not words or words[0] == "none":
        return "none"
    return " ".join(words[1:3]) if words[1] == "exited" else words[1]


def _running_workers(runners: Sequence[Runner], cluster: str, max_parallel: int) -> list[str]:
    return [w for w, state in _status_lines(runners, cluster, None, max_parallel).items() if state == "running"]


def _stop_run(cluster: str, run_id: str | None, runners: Sequence[Runner], max_parallel: int) -> Step:
    """Stop a run on the given workers; without a run id, whatever run each worker has as its current one."""
    argv = script_command("stop", cluster, run_id or "", str(STOP_GRACE_SECONDS))
    return Step("stop", tuple(run_each(runners, lambda r: r.run(argv, capture=True), max_parallel)))


def _recorded_run(access: ClusterAccess, run_id: str | None) -> RunRecord:
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
        return all(s.ok for s in self.steps) and all(v != "running" for v in self.worker_states.values())

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "run_id": self.run_id, "ok": self.ok, "workers": dict(self.worker_states)}


def stop(ctx: Context, name: str | None, run_id: str | None = None, max_parallel: int = 32) -> StopReport:
    """TERM the run's process group everywhere, KILL after a grace period, free the TPU, record the end."""
    access = cluster_access(ctx, name, need_spec=False)
    runners = make_runners(access, access.workers)
    try:
        run = _recorded_run(access, run_id)
        steps = [_stop_run(access.state.name, run.id, runners, max_parallel)]
        if access.spec is not None:
            steps.append(_free_tpu(ctx, access, runners, access.spec, max_parallel, None))
        states = _status_lines(runners, access.state.name, run.id, max_parallel)
    finally:
        for runner in runners:
            runner.close()
    _update_run(ctx, access.state.name, run.id, states)
    return StopReport(access.state.name, run.id, tuple(steps), states)


def follow(ctx: Context, name: str | None, run_id: str | None = None, *, on_line: LineHandler | None = None,
           max_parallel: int = 32, cancel: threading.Event | None = None) -> Step:
    """Stream every worker's output of the run until it ends there; each result carries that exit code.

    Ctrl-C (or `cancel`, set from another thread) stops following at once and raises FollowInterrupted
    (or fanout.Cancelled); the run itself goes on.
    """
    access = cluster_access(ctx, name, need_spec=False)
    run = _recorded_run(access, run_id)
    runners = make_runners(access, access.workers)
    try:
        argv = script_command("follow", access.state.name, run.id, "1")
        try:
            results = tuple(run_each(runners, lambda r: r.run(argv, on_line=on_line), max_parallel, cancel))
        except KeyboardInterrupt:
            raise FollowInterrupted(access.state.name, run.id) from None
        states = _status_lines(runners, access.state.name, run.id, max_parallel)
    finally:
        for runner in runners:
            runner.close()
    _update_run(ctx, access.state.name, run.id, states)
    return Step("follow", results)


def follow_and_wait(ctx: Context, name: str | None, run_id: str | None = None, *,
                    on_line: LineHandler | None = None) -> int:
    """Follow the run to its end on every worker; the worst worker's exit code."""
    return worst_exit_code(follow(ctx, name, run_id, on_line=on_line).results)


def run_states(ctx: Context, name: str | None, max_parallel: int = 32,
               connect_timeout: float | None = None) -> dict[str, str]:
    """Each worker's state of the current run: running, exited N, killed, lost (or unreachable)."""
    access = cluster_access(ctx, name, need_spec=False)
    run = access.state.current_run
    if run is None:
        return {}
    extra = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    runners = make_runners(access, access.workers, **extra)
    try:
        states = _status_lines(runners, access.state.name, run.id, max_parallel)
    finally:
        for runner in runners:
            runner.close()
    _update_run(ctx, access.state.name, run.id, states)
    return states


def worst_exit_code(results: Sequence[RunResult]) -> int:
    """0 when every worker exited 0; else the largest failure (a worker without an exit code counts as 255)."""
    codes = [255 if r.exit_code is None else r.exit_code for r in results]
    return max(codes, default=255)


def _record_run(ctx: Context, access: ClusterAccess, run: RunRecord) -> None:
    state = ctx.store.require(access.state.name)  # re-read: another command may have written meanwhile
    state.runs.append(run)
    state.log("launch", f"run {run.id} started on {len(run.workers)} worker(s): {run.command}")
    ctx.store.save(state)


def _update_run(ctx: Context, cluster: str, run_id: str, states: Mapping[str, str]) -> None:
    state = ctx.store.load(cluster)
    run = state.run(run_id) if state else None
    if state is None or run is None:
        return
    run.worker_states.update({w: s for w, s in states.items() if s not in ("unreachable", "none")})
    ctx.store.save(state)
