"""`tpuops watch`: stay attached to a cluster's run and bring it back after a preemption.

A small state machine, one step per poll (`Watcher.step`): observe the TPU (or queued resource) and then the
run on its workers, `judge` what was seen, and act on the verdict:

    fine     -> poll again after the interval
    ended    -> the run is over: every worker exited 0 (exit 0), or the trainer failed by itself (its code)
    recover  -> delete the TPU, create it again with `up` (capacity rules included), relaunch the same
                command with TPUOPS_RESTART=n and TPUOPS_RESUME=1 (a trainer that failed by itself is only
                relaunched, with --restart-on-failure)

Polling and retrying are tenacity policies, not loops. Every event is printed with a time (through
`on_event`) and appended to the cluster's state, so `tpuops status` can show restarts and when.
Ctrl-C (KeyboardInterrupt) goes straight up: watching stops and nothing is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from tenacity import Retrying, retry_if_exception, retry_if_result, stop_after_attempt, wait_fixed

from tpuops import retry
from tpuops.access.cluster import placed, resolve_name, spec_of
from tpuops.cloud.kinds import handler
from tpuops.cloud.kinds.base import MISSING, Phase
from tpuops.context import Context
from tpuops.errors import (
    ClusterNotFound,
    CredentialsError,
    ForeignResourceError,
    SpecError,
    TpuopsError,
    UsageError,
)
from tpuops.ops import autostop as cost_guard
from tpuops.ops import down as down_ops
from tpuops.ops import launch as launch_ops
from tpuops.ops import pool_move
from tpuops.ops import up as up_ops
from tpuops.ops.specs import load_checked
from tpuops.ops.status import tpu_mode
from tpuops.ops.watch_verdicts import (  # noqa: F401  (watch's verdicts, options and result, as callers name them)
    ENV_KNOBS,
    FINE,
    GONE,
    RESTART_EVENT,
    UNREACHABLE,
    EventHandler,
    Origin,
    TpuView,
    Verdict,
    WatchGaveUp,
    WatchOptions,
    WatchResult,
    all_unreachable,
    counts_as_preemption,
    is_unhealthy,
    judge_run,
    judge_tpu,
)
from tpuops.spec import Spec
from tpuops.state import MOVED_EVENT, ClusterState
from tpuops.watchdog.judge import Watchdog


def watch(ctx: Context, name: str | None, options: WatchOptions, on_event: EventHandler | None = None,
          sleep: Callable[[float], None] = time.sleep, make_watcher: Callable[..., Watcher] | None = None
          ) -> WatchResult:
    """Watch the cluster's current run until it ends; recover from preemption on the way. `make_watcher`:
    a Watcher that also answers to a lease (the guard's; see tpuops/ops/guard_loop.py)."""
    watcher = (make_watcher or Watcher)(ctx, resolve_name(ctx, name), options, on_event, sleep)
    try:
        result = watcher.run()
    except WatchGaveUp as err:
        watcher.event("gave-up", err.message)  # kept in the state: `tpuops status` users see why it stopped
        if options.down:
            watcher.tear_down()
        raise
    if options.down and not result.keep_tpu:
        watcher.tear_down()
        return replace(result, torn_down=True)
    return result


@dataclass
class Watcher:
    ctx: Context
    cluster: str
    options: WatchOptions
    on_event: EventHandler | None = None
    sleep: Callable[[float], None] = time.sleep
    restarts: int = 0  # recovery attempts by this watch
    trouble_since: float | None = None  # when the TPU turned UNHEALTHY or every worker unreachable
    pending_recreate: bool = False  # a recovery deleted the TPU and has not created it again yet
    first_restart: int = 0  # the restart number of the run being watched: TPUOPS_RESTART continues from it
    blind: bool = False  # the last poll could not read the TPU's state (kept once in the state, not every poll)
    awaited_record: bool = False  # a TPU gone with autostop on: one more poll for the agent's record
    watchdog: Watchdog | None = None  # the hang watchdog, asked while the run is running
    pool_failing_since: float | None = None  # with tpu.pools: when re-creating in the TPU's pool first failed
    up_phase: Phase = "provisioning"  # during a re-creation: the phase `up`'s progress said last

    # ------------------------------------------------------------------------------------ the loop
    def run(self) -> WatchResult:
        state = self.ctx.store.require(self.cluster)
        run = state.current_run
        if run is None:
            raise UsageError(f"'{self.cluster}' has no run to watch",
                             "start one with `tpuops launch`, or use `tpuops run SPEC --watch`")
        self.first_restart = run.restart
        self.watchdog = Watchdog(self.ctx, self.cluster, self.event, self.say, sleep=self.sleep)
        self.event("watch", f"watching run {run.id} (restart {run.restart}) of '{self.cluster}', "
                            f"polling every {self.options.poll_interval:g}s, at most "
                            f"{self.options.max_restarts} restart(s)")
        policy = Retrying(retry=retry_if_result(lambda outcome: outcome is None),
                          wait=wait_fixed(self.options.poll_interval), sleep=self.sleep)
        result = policy(self.step)
        self.event("watch", f"watch ended: {result.reason} (exit {result.exit_code})")
        return result

    def step(self) -> WatchResult | None:
        """One poll: observe, judge, act. Returns the result once the run is over, None to poll again."""
        verdict = self.observe_and_judge()
        if verdict.kind == "ended":
            run = self.state().current_run
            return WatchResult(self.cluster, run.id if run else None, verdict.exit_code, verdict.reason,
                               self.restarts, keep_tpu=verdict.keep_tpu)
        if verdict.kind == "recover":
            self.recover(verdict)
        return None

    def observe_and_judge(self) -> Verdict:
        try:
            tpu = self.observe_tpu()
        except TpuopsError as err:  # the API may be briefly unavailable: look again at the next poll
            (self.say if self.blind else self.event)("observe", f"could not read the TPU's state: {err.message}")
            self.blind = True
            return FINE
        self.blind = False
        verdict = judge_tpu(tpu)
        if verdict is not None and verdict.kind == "recover":
            return self.unless_autostopped(verdict, gone=tpu.state == MISSING)
        if verdict is not None:
            return verdict
        states = launch_ops.run_states(self.ctx, self.cluster)
        verdict = judge_run(states, self.options.restart_on_failure)
        if verdict.kind == "fine" and is_unhealthy(tpu):
            return self.after_grace(f"TPU health {tpu.health}", "tpu")
        if verdict.kind == "fine" and all_unreachable(states):
            return self.after_grace("every worker unreachable", "workers")
        self.trouble_since = None
        if verdict.kind == "fine" and "running" in states.values() and self.watchdog is not None:
            hang = self.watchdog.verdict()  # None: progressing (or not yet started)
            if hang is not None:
                return Verdict("ended", hang.reason, origin="watchdog", exit_code=1, keep_tpu=True) if hang.stop \
                    else Verdict("recover", hang.reason, origin="watchdog", recreate=hang.recreate, confirmed=True,
                                 lost_for=hang.quiet_for)
        return verdict

    def unless_autostopped(self, verdict: Verdict, gone: bool) -> Verdict:
        """A TPU the cost guard deleted (its record in the bucket says so) is an end, not a preemption."""
        state = self.state()
        spec = spec_of(state)
        record = cost_guard.deleted_by_autostop(self.ctx, state, spec)
        if record is None:
            if cost_guard.setting_of(state, spec).enabled and not self.awaited_record:
                self.awaited_record = True  # the agent writes its record just after deleting: look once more
                return FINE
            self.awaited_record = False
            return verdict
        return Verdict("ended", f"the TPU was {record.line(confirmed=gone)}", origin="autostop", exit_code=0)

    def after_grace(self, why: str, origin: Origin) -> Verdict:
        """Trouble that may pass by itself (maintenance, a network blip) gets `unhealthy_grace` seconds."""
        now = time.monotonic()
        if self.trouble_since is None:
            self.trouble_since = now
            self.event("trouble", f"{why}: recovering unless it passes within {self.options.unhealthy_grace:g}s")
        if now - self.trouble_since < self.options.unhealthy_grace:
            return FINE
        self.trouble_since = None
        return Verdict("recover", f"{why} for more than {self.options.unhealthy_grace:g}s", origin=origin)

    # ------------------------------------------------------------------------------------- observe
    def state(self) -> ClusterState:
        state = self.ctx.store.load(self.cluster)
        if state is None:
            raise WatchGaveUp(f"cluster '{self.cluster}' no longer has local state (taken down?): stopped watching",
                              "start again with `tpuops run SPEC --watch`")
        return state

    def observe_tpu(self) -> TpuView:
        state = self.state()
        spec = spec_of(state)
        record = state.tpu_record()
        if record is None:
            return TpuView(MISSING)
        cloud = self.ctx.provider_for(spec, state).cloud()
        seen = handler(record.kind).describe(cloud, record, tpu_mode(state, spec))
        node = seen.node
        return TpuView(node.state if node else MISSING, node.health if node else None, seen.queued_state,
                       seen.lost_slice)

    # ------------------------------------------------------------------------------------- recover
    def recover(self, verdict: Verdict) -> None:
        """Recovery attempts with exponential backoff between failures, bounded by --max-restarts."""
        left = self.options.max_restarts - self.restarts
        if left <= 0:
            raise WatchGaveUp(f"{verdict.reason}, and --max-restarts {self.options.max_restarts} is used up: "
                              "gave up", "rerun `tpuops watch` with a higher --max-restarts, or `tpuops down`")
        self.event("recovery", f"{verdict.reason}: recovering (restart {self.restarts + 1} "
                               f"of at most {self.options.max_restarts})")
        pool = self.state().pool
        if pool and counts_as_preemption(verdict) and not self.pending_recreate:
            self.event(pool_move.PREEMPTED_EVENT, f"{verdict.reason} in pool {pool}", pool=pool)  # churn counts it
        self.pending_recreate = self.pending_recreate or verdict.recreate
        policy = Retrying(
            retry=retry_if_exception(worth_retrying),
            wait=retry.backoff(self.options.backoff, self.options.backoff_max),
            stop=stop_after_attempt(left),
            sleep=self.sleep,
            before_sleep=lambda state: self.event(
                "recovery", f"attempt failed: {state.outcome.exception()}; trying again",  # type: ignore[union-attr]
                error=True),
            reraise=True,
        )
        try:
            policy(lambda: self.recover_once(verdict.reason))
        except TpuopsError as err:
            if not worth_retrying(err):
                raise
            raise WatchGaveUp(f"recovery failed {self.restarts} time(s), --max-restarts "
                              f"{self.options.max_restarts} is used up: {err.message}",
                              err.hint or "see `tpuops status`; `tpuops down` frees the quota") from err

    def recover_once(self, reason: str) -> None:
        self.restarts += 1
        restart = self.first_restart + self.restarts
        if self.pending_recreate or judge_tpu(self.observe_tpu()) is not None:
            self.replace_tpu()
        run = self.state().current_run
        assert run is not None
        options = launch_ops.LaunchOptions(command=run.command, restart=restart, replace=True)
        report = launch_ops.launch_run(self.ctx, self.cluster, options, on_step=self.show_step)
        if not report.ok:
            failed = next(step for step in report.steps if not step.ok)
            raise TpuopsError(f"relaunch failed at {failed.name}: {'; '.join(failed.failures())}")
        self.event(RESTART_EVENT, f"run {report.run_id} relaunched as restart {restart} after: {reason}")

    def replace_tpu(self) -> None:
        """Delete the TPU (or queued resource) and create it again the way `up` does (zones, capacity waits).
        The spec file is read once here and handed on: to the pool choice, to `up`, to the checkpoints' move."""
        state = self.state()
        written = self.spec_as_written(state)  # every pool, as `up` and the pool choice read it
        spec = placed(written, state)  # the pool the TPU is in
        self.pending_recreate = True
        record = state.tpu_record()
        if record is not None and record.zone:
            self.event("recovery", f"deleting {record.kind} {record.name} in {record.zone}")
            record.status = "deleting"
            self.ctx.store.save(state)  # a crash from here on leaves a record `down` and `up` understand
            doomed = down_ops.Doomed(record.kind, record.name, record.zone)
            down_ops.delete_one(self.ctx.provider_for(spec, state).cloud(), tpu_mode(state, spec), doomed,
                                lambda kind, name, text: None)
        self.forget_workers()
        move = pool_move.choose(state, written, self.pool_failing_since)
        if move.why:
            self.event("recovery", f"leaving pool {state.pool}: {move.why}")
        self.event("recovery", f"creating the TPU again ({spec.tpu.type})", phase="provisioning")
        self.up_phase = "provisioning"
        try:
            result = up_ops.up(self.ctx, state.spec_path, wait_for_capacity=self.options.wait_for_capacity,
                               progress=self.up_progress, guard=False, order=move.order, spec=written)
        except TpuopsError:
            self.pool_failing_since = self.pool_failing_since or time.time()
            raise
        self.pool_failing_since = None
        self.pending_recreate = False
        now = self.state()
        self.event("recovery", f"TPU ready again in {now.zone} with {len(result.workers)} worker(s)", phase="setup")
        if state.pool and now.pool != state.pool and state.zone and now.zone:
            self.moved(state, now, move.why or "its pool could not create the TPU", written)

    def spec_as_written(self, state: ClusterState) -> Spec:
        """The cluster's spec file, checked as `up` checks it, before anything is deleted."""
        try:
            return load_checked(state.spec_path)
        except TpuopsError as err:
            raise SpecError(f"cannot use the spec of '{self.cluster}' at {state.spec_path}: {err.message}",
                            "put the spec file back (or fix it) to let watch recreate the TPU") from None

    def up_progress(self, kind: str, name: str, text: str, phase: Phase | None = None) -> None:
        """`up`'s progress, printed; a wait for capacity, and its end, noted once per change of the phase its
        emitter gave (cloud/kinds/tpu.py)."""
        self.say("up", f"{kind} {name}: {text}")
        if phase is not None and phase != self.up_phase:
            self.up_phase = phase
            what = "waiting for capacity" if phase == "waiting" else "capacity found, the TPU is being created"
            self.note("recovery", f"{what} ({kind} {name}: {text})", phase=phase)

    def moved(self, before: ClusterState, after: ClusterState, why: str, spec: Spec) -> None:
        """The run now lives in another pool: its checkpoints follow it to that region, and it is said where."""
        message, facts = pool_move.follow(self.ctx, before, after, why, spec)
        self.event(MOVED_EVENT, message, pool=after.pool, **facts)

    def forget_workers(self) -> None:
        self.ctx.store.forget_workers(self.state())

    def tear_down(self) -> None:
        self.event("down", "tearing down (--down)")
        plan, cloud = down_ops.find(self.ctx, self.cluster)
        down_ops.execute(self.ctx, plan, cloud)
        self.say("down", "deleted " + (", ".join(f"{d.kind} {d.name}" for d in plan.doomed) or "nothing"))

    # -------------------------------------------------------------------------------------- events
    def event(self, kind: str, message: str, *, pool: str | None = None, **data: object) -> None:
        """Printed with a time and kept in the cluster's state (`pool`: the event's pool, kept with it; `data`: for
        a ledger, where a guard keeps one; `phase`: where a recovery's time goes, see guard/goodput.py)."""
        state = self.ctx.store.load(self.cluster)
        if state is not None:
            state.log(kind, message, by=self.actor(), pool=pool)
            self.ctx.store.save(state)
        self.say(kind, message)

    def actor(self) -> str:
        """Who this watch is, in the state's events (`status` says who restarted the run)."""
        return "`tpuops watch`"

    def note(self, kind: str, message: str, **data: object) -> None:
        """Printed, and kept where a guard keeps its ledger (not in the state: `up`, running meanwhile, saves its
        own copy of it)."""
        self.say(kind, message)

    def say(self, kind: str, message: str) -> None:
        """Printed only (progress of `up` and `launch`)."""
        if self.on_event is not None:
            self.on_event(datetime.now(timezone.utc).strftime("%H:%M:%S"), kind, message)

    def show_step(self, step: launch_ops.Step) -> None:
        failures = step.failures()
        self.say("launch", f"{step.name}: " + (f"failed: {'; '.join(failures)}" if failures
                                               else f"ok on {len(step.results)} worker(s)"))


def worth_retrying(err: BaseException) -> bool:
    """Recovery errors that another attempt can fix (capacity, API, SSH), not ones the user must fix."""
    hopeless = (UsageError, SpecError, ForeignResourceError, CredentialsError, ClusterNotFound, WatchGaveUp)
    return isinstance(err, TpuopsError) and not isinstance(err, hopeless)
