"""The watch loop behind a lease: `tpuops watch NAME --headless` (the guard), and `tpuops watch` / `run --watch`
on a laptop, which recover only while they hold the lease and otherwise view the guard's ledger.

`ops/watch.py` keeps judging and recovering; `GuardedWatcher` adds what a recoverer that may not be alone
needs: the lease checked (and renewed) before every recovery, a dead TPU acted on only when two polls in a row
say so (a failed status call is never such a poll), every event in the ledger, the run's steps read from its
TensorBoard scalars (steps lost, goodput), a heartbeat each minute, and the webhook told what is worth waking
up for.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tpuops.access.cluster import resolve_logdir, resolve_name, spec_of
from tpuops.access.guard_place import guard_store, notify_url
from tpuops.access.guard_state import StatePublisher
from tpuops.cloud.blob_types import BlobStore
from tpuops.context import Context
from tpuops.errors import TpuopsError, UsageError
from tpuops.guard.heartbeat import HeartbeatWriter, IdleHeartbeat, heartbeat_interval
from tpuops.guard.lease import Lease, LeaseKeeper, LeaseLost, LeaseRecord, read_lease
from tpuops.guard.ledger import Ledger, Progress
from tpuops.guard.notify import Notifier
from tpuops.ops import watch as watch_ops
from tpuops.ops.guard_viewer import view_guard
from tpuops.ops.logs import LogsRequest, logs_provider, open_source, run_map
from tpuops.providers.guard_host import HOLDER_ENV

ROLE_GUARD, ROLE_WATCH = "guard", "watch"
ERROR_KINDS = frozenset({"observe", "gave-up", "error"})
RUN_OVER = frozenset({"ended", "gave-up"})  # ledger events after which the guard idles until the next run


class GuardStoodDown(Exception):  # noqa: N818  not a failure: another holder recovers now
    """The lease went to another holder: this loop must stop acting (it views, or waits, instead)."""


def default_holder(role: str, env: dict[str, str] | Any) -> str:
    """A guard is known by its host (so a restarted guard finds its own lease); a laptop watch by its process."""
    if env.get(HOLDER_ENV):
        return env[HOLDER_ENV]
    host = socket.gethostname()
    return f"guard@{host}" if role == ROLE_GUARD else f"watch@{host}:{os.getpid()}"


def watch_with_lease(ctx: Context, name: str | None, options: watch_ops.WatchOptions, *, role: str = ROLE_WATCH,
                     on_event: watch_ops.EventHandler | None = None, sleep: Callable[[float], None] = time.sleep
                     ) -> watch_ops.WatchResult:
    """Recover while holding the cluster's lease; while another live holder has it, a guard waits its turn and
    a laptop watch prints the holder's events (and takes over once that holder has gone silent)."""
    cluster = resolve_name(ctx, name)
    state = ctx.store.require(cluster)
    spec = spec_of(state)
    store = guard_store(ctx, state, spec)
    if store is None:
        if role == ROLE_GUARD:
            raise UsageError(f"the guard keeps its lease and ledger in the run's bucket, and '{cluster}' has none",
                             "add `bucket: {name: ...}` to the spec and run `tpuops up SPEC` again")
        return watch_ops.watch(ctx, cluster, options, on_event, sleep)
    holder = default_holder(role, ctx.env)
    lease = Lease(store, holder, role, options.poll_interval)
    ledger = Ledger(store, holder)
    if role == ROLE_WATCH:
        return _one_run(ctx, cluster, options, lease, ledger, on_event, sleep, spec)
    say = _sayer(on_event)
    idle = IdleHeartbeat(ledger, holder, heartbeat_interval(ctx.env))
    over = _last_run_over(ledger)  # a guard started again (reboot, refresh) does not watch an ended run again
    while True:  # the guard outlives its runs: under systemd's Restart=always an exit would only start it again
        _wait_for_a_run(ctx, cluster, options.poll_interval, say, sleep, over, idle)
        try:
            over = _one_run(ctx, cluster, options, lease, ledger, on_event, sleep, spec).run_id
        except watch_ops.WatchGaveUp as err:  # in the ledger already; recovering again would only fail again
            say("gave-up", err.message)
            run = ctx.store.require(cluster).current_run
            over = run.id if run else None
        say("guard", f"run {over} is over: waiting for the next `tpuops launch {cluster}`")


def _one_run(ctx: Context, cluster: str, options: watch_ops.WatchOptions, lease: Lease, ledger: Ledger,
             on_event: watch_ops.EventHandler | None, sleep: Callable[[float], None], spec: Any
             ) -> watch_ops.WatchResult:
    """Watch the current run to its end, recovering while this holds the lease."""
    say = _sayer(on_event)
    store, role = lease.store, lease.role
    waiting_said = False
    while True:
        other = lease.try_acquire()
        if other is None:
            try:
                return _recover_holding(ctx, cluster, options, lease, ledger, on_event, sleep, spec)
            except GuardStoodDown as err:
                say("lease", str(err))
                continue
        if role == ROLE_WATCH:
            result = view_guard(ledger, lambda: lease_of(store), cluster, options.poll_interval, say, sleep)
            if result is not None:
                return result
            say("lease", "the guard has gone silent: this watch takes over recovering")
            continue
        if not waiting_said:
            say("lease", f"the lease is {other.describe(time.time())}: waiting until it is free or stale")
            waiting_said = True
        sleep(options.poll_interval)


def _wait_for_a_run(ctx: Context, cluster: str, interval: float, say: Callable[[str, str], None],
                    sleep: Callable[[float], None], over: str | None, idle: IdleHeartbeat) -> None:
    """A guard started before the first launch (`up --guard`), or whose run is over (`over`: the run that
    ended, finished, was stopped, was given up on, or lost its TPU to autostop), waits for the next run instead of
    exiting, and keeps its heartbeat meanwhile."""
    def waiting() -> bool:
        run = ctx.store.require(cluster).current_run
        return run is None or run.id == over

    if not waiting():
        return
    waiting_for = f"the next `tpuops launch {cluster}` (run {over} is over)" if over else \
        f"the first `tpuops launch {cluster}`"
    if over is None:
        say("guard", f"'{cluster}' has no run yet: waiting for `tpuops launch {cluster}`")
    while waiting():
        idle.tick(waiting_for)
        sleep(interval)


def _last_run_over(ledger: Ledger) -> str | None:
    """The run whose end the ledger holds last (ended, or given up on), so a restarted guard leaves it alone."""
    try:
        events = [event for _, event in ledger.events()]
    except TpuopsError:
        return None  # the bucket unreadable now: the watch itself finds the run over again
    ends = [event for event in events if event.kind in RUN_OVER and event.data.get("run_id")]
    return str(ends[-1].data["run_id"]) if ends else None


def lease_of(store: BlobStore) -> LeaseRecord | None:
    return read_lease(store)[0]


def _recover_holding(ctx: Context, cluster: str, options: watch_ops.WatchOptions, lease: Lease, ledger: Ledger,
                     on_event: watch_ops.EventHandler | None, sleep: Callable[[float], None],
                     spec: Any) -> watch_ops.WatchResult:
    say = _sayer(on_event)
    progress = Progress.resumed(_quietly(ledger.heartbeat))
    beat = HeartbeatWriter(ledger, progress, lease, heartbeat_interval(ctx.env))
    keeper = LeaseKeeper(lease, tick=beat.tick, on_error=lambda text: say("lease", text)).start()
    url = notify_url(spec, ctx.store.cluster_dir(cluster))
    notifier = Notifier(url, cluster, warn=lambda text: say("notify", text)) if url else None

    # A guard (on a VM: its own copy of the state) hands what it changes back to the laptop's commands.
    publisher = StatePublisher(ctx, cluster, lease.store) if lease.role == ROLE_GUARD else None

    def make(ctx: Context, name: str, options: watch_ops.WatchOptions, on_event: Any, sleep: Any) -> GuardedWatcher:
        return GuardedWatcher(ctx, name, options, on_event, sleep, lease=lease, keeper=keeper, ledger=ledger,
                              progress=progress, notifier=notifier, steps=StepReader(ctx, name), beat=beat,
                              publisher=publisher)

    stood_down = False
    try:
        result = watch_ops.watch(ctx, cluster, options, on_event, sleep, make_watcher=make)
        _record(ledger, notifier, say, "ended", result.reason, exit_code=result.exit_code, run_id=result.run_id)
        return result
    except GuardStoodDown:
        stood_down = True
        raise
    finally:
        keeper.stop()
        if publisher is not None:
            publisher.publish()  # the run's last states
        if not stood_down:  # after losing the lease, the heartbeat and the lease are the new holder's
            # A guard goes on waiting for the next run (its idle beats follow); a laptop watch is gone.
            beat.tick(force=True, stopped="the laptop's `tpuops watch` ended" if lease.role == ROLE_WATCH else None)
            lease.release()
        if notifier is not None:
            notifier.close()


class StepReader:
    """The run's steps from its TensorBoard scalars, read through `logs/` (the same incremental tail)."""

    def __init__(self, ctx: Context, cluster: str) -> None:
        self.ctx, self.cluster = ctx, cluster
        self._source: Any = None
        self.unavailable = False

    def poll(self) -> list[int]:
        if self.unavailable:
            return []
        try:
            if self._source is None:
                # The current run's own scalars (with its resumes): an earlier run's event files in the same
                # logdir hold steps that are not this run's, and would count as steps lost.
                request = LogsRequest(logdir=resolve_logdir(self.ctx, self.cluster, None),
                                      provider=logs_provider(self.ctx, self.cluster, None),
                                      runs=run_map(self.ctx, self.cluster, None, None))
                self._source = open_source(self.ctx, request, warn=lambda text: None)
            return [point.step for point in self._source.poll()]
        except UsageError:
            self.unavailable = True  # no logs.tensorboard in the spec: steps unknown, goodput counts time only
            return []
        except TpuopsError:
            return []  # no logdir yet, or a passing error: the next poll tries again


@dataclass
class GuardedWatcher(watch_ops.Watcher):
    lease: Lease | None = None
    keeper: LeaseKeeper | None = None
    ledger: Ledger | None = None
    progress: Progress = field(default_factory=Progress)
    notifier: Notifier | None = None
    steps: StepReader | None = None
    beat: HeartbeatWriter | None = None
    publisher: StatePublisher | None = None
    unconfirmed: str | None = None  # a dead TPU seen once: acted on only when the next poll says so too

    def step(self) -> watch_ops.WatchResult | None:
        self._check_lease()
        self._read_steps()
        result = super().step()
        if self.publisher is not None:
            self.publisher.publish()
        return result

    def actor(self) -> str:
        return "the guard" if self.lease is not None and self.lease.role == ROLE_GUARD else super().actor()

    def observe_tpu(self) -> watch_ops.TpuView:
        view = super().observe_tpu()
        self.progress.tick(time.time(), view.state)
        if self.beat is not None:
            self.beat.tpu_state = view.state
        return view

    def observe_and_judge(self) -> watch_ops.Verdict:
        verdict = super().observe_and_judge()
        if verdict.kind != "recover" or not verdict.recreate or verdict.confirmed:
            self.unconfirmed = None
            return verdict
        if self.unconfirmed is None:
            self.unconfirmed = verdict.reason
            self.event("trouble", f"{verdict.reason}: recovering if the next poll says so too")
            return watch_ops.FINE
        self.unconfirmed = None
        return verdict

    def recover(self, verdict: watch_ops.Verdict) -> None:
        self._check_lease()
        kind = "hang" if verdict.confirmed else "preemption" if verdict.recreate else "failure"
        self.note(kind, verdict.reason, step_before=self.progress.step,
                  **({"lost_for": round(verdict.lost_for, 1)} if verdict.lost_for else {}))
        super().recover(verdict)

    def recover_once(self, reason: str) -> None:
        self._check_lease(renew=True)  # every attempt: a recovery may take hours of capacity waits
        super().recover_once(reason)

    def event(self, kind: str, message: str, *, pool: str | None = None, **data: Any) -> None:
        super().event(kind, message, pool=pool, **data)  # the pool goes into the state; the ledger's facts say theirs
        if kind in ERROR_KINDS:  # the rest say so themselves (a failed recovery attempt: error=True)
            data["error"] = True
        if kind in RUN_OVER:  # which run: a guard started again leaves that one alone
            state = self.ctx.store.load(self.cluster)
            run = state.current_run if state is not None else None
            data["run_id"] = run.id if run else None
        self.record(kind, message, **data)

    def note(self, kind: str, message: str, **data: Any) -> None:
        """An event of the guard's own (not the watch's): printed too, and kept in the ledger."""
        self.say(kind, message)
        self.record(kind, message, **data)

    def record(self, kind: str, message: str, **data: Any) -> None:
        self.progress.event(kind, data, time.time())  # the tally reads what the ledger holds, as it is written
        if self.ledger is not None:
            _record(self.ledger, self.notifier, self.say, kind, message, **data)

    def _check_lease(self, renew: bool = False) -> None:
        if self.keeper is None or self.lease is None:
            return
        try:
            self.keeper.check()
            if renew:
                self.lease.renew()
        except LeaseLost as err:
            raise GuardStoodDown(f"{err.message}: stopped recovering") from err

    def _read_steps(self) -> None:
        if self.beat is not None:
            run = self.state().current_run
            self.beat.run_id = run.id if run else None
        if self.steps is None:
            return
        closed = self.progress.steps_seen(self.steps.poll(), time.time())
        if closed is not None:
            self.note("recovered", f"training resumed at step {closed['first_step_after']} "
                                     f"{closed['seconds_to_recover']:.0f}s after the preemption was seen; "
                                     f"{closed['steps_lost']} step(s) lost (last before: {closed['step_before']})",
                        **closed)


def _record(ledger: Ledger, notifier: Notifier | None, say: Callable[[str, str], None], kind: str, message: str,
            **data: Any) -> None:
    try:
        ledger.append(kind, message, **data)
    except TpuopsError as err:
        say("ledger", f"could not write the ledger: {err.message}")
    if notifier is not None:
        notifier.send(kind, message, **{k: v for k, v in data.items() if k != "error"})


def _quietly(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except TpuopsError:
        return None


def _sayer(on_event: watch_ops.EventHandler | None) -> Callable[[str, str], None]:
    def say(kind: str, message: str) -> None:
        if on_event is not None:
            on_event(time.strftime("%H:%M:%S", time.gmtime()), kind, message)
    return say
