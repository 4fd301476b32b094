"""What `tpuops guard status` and the `guard:` line of `tpuops status` show, read from the ledger and the lease
in the bucket (never from the guard itself: a dead guard must still be reported, and why)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tpuops.access.guard_place import guard_store
from tpuops.context import Context
from tpuops.durations import format_duration
from tpuops.errors import TpuopsError, UsageError
from tpuops.guard.goodput import Goodput
from tpuops.guard.lease import LeaseRecord, read_lease
from tpuops.guard.ledger import Heartbeat, Ledger, LedgerEvent, role_for
from tpuops.providers.base import Provider
from tpuops.providers.guard_host import GuardHost, GuardHostInfo
from tpuops.spec import Spec
from tpuops.state import ClusterState

RESTART_KIND = "restart"  # ops/watch.py's RESTART_EVENT: one per relaunch after a recovery


@dataclass(frozen=True)
class GuardReport:
    cluster: str
    host: GuardHostInfo | None
    heartbeat: Heartbeat | None
    lease: LeaseRecord | None
    recoveries: int
    events: tuple[LedgerEvent, ...]  # the last few
    last_error: LedgerEvent | None
    read_error: str | None = None  # the bucket could not be read
    host_known: bool = True  # the provider can tell where its guard runs (so `host` None means: none runs)
    current_run: str | None = None  # the run the laptop's state says is current

    @property
    def goodput(self) -> Goodput | None:
        return self.heartbeat.goodput if self.heartbeat else None

    @property
    def host_running(self) -> bool | None:
        """Whether the guard's process or VM runs: False once `guard down` stopped it or its host says it does
        not run; None where nothing tells (no host recorded: a `watch --headless` the user runs himself)."""
        if self._guard_down():
            return False
        if not self.host_known or self.host is None:
            return None
        return self.host.state == "running"

    @property
    def alive(self) -> bool:
        """A guard (never a laptop watch) whose host runs and whose heartbeat is on time."""
        return (self.heartbeat is not None and self.heartbeat.role == "guard" and self.heartbeat.alive()
                and self.host_running is not False)

    @property
    def role_to_grant(self) -> str | None:
        return role_for(self.last_error.message) if self.last_error else None

    def state_line(self) -> str:
        """alive / stopped / dead / not running, with the heartbeat's age and where the guard runs."""
        where = f"{self.host.kind} {self.host.name}" if self.host else "no guard host"
        beat = self.heartbeat
        if beat is None:
            state = "no heartbeat yet" if self.host_running else "not running"
            return f"{state} ({where})"
        age = format_duration(beat.age())
        if beat.role != "guard":
            return self._watch_line(beat, age, where)
        if self.host_running is False:
            how = "stopped by `tpuops guard down`" if self._guard_down() else "not running"
            return f"{how} ({where}; last heartbeat {age} ago)"
        if self.alive and beat.idle:
            if self.current_run and self.current_run != beat.run_id:  # launched since: the guard's next poll
                return f"alive, taking up run {self.current_run} (heartbeat {age} ago; {where})"
            return f"alive, idle: waiting for {beat.idle} (heartbeat {age} ago; {where})"
        if self.alive:
            return f"alive (heartbeat {age} ago; {where})"
        if self.events and self.events[-1].kind == "ended":
            return f"done: the run ended ({self.events[-1].message}) {age} ago"
        return f"dead: last heartbeat {age} ago ({where}); `tpuops guard up {self.cluster}` brings it back"

    def _watch_line(self, beat: Heartbeat, age: str, where: str) -> str:
        """A laptop `tpuops watch` held the lease: it is not a guard (it stops with the laptop)."""
        if beat.alive():
            return (f"no guard: a laptop `tpuops watch` is watching ({beat.holder}, heartbeat {age} ago), until "
                    f"the laptop sleeps; `tpuops guard up {self.cluster}` covers the night ({where})")
        how = "ended" if beat.stopped else "went silent"
        return f"not running: the last watcher, a laptop `tpuops watch`, {how} {age} ago ({where})"

    def _guard_down(self) -> bool:
        downs = [event for event in self.events if event.kind == "guard-down"]
        return bool(downs) and self.heartbeat is not None and downs[-1].ts >= self.heartbeat.ts - 1.0

    def summary(self) -> str:
        """The `guard:` line of `tpuops status`."""
        parts = [self.state_line(), f"{self.recoveries} recover{'y' if self.recoveries == 1 else 'ies'}"]
        if self.heartbeat is not None and self.heartbeat.steps_lost:
            parts.append(f"{self.heartbeat.steps_lost} step(s) lost")
        if self.goodput is not None:
            parts.append(self.goodput.line())
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "alive": self.alive, "state": self.state_line(),
                "host": asdict(self.host) if self.host else None,
                "heartbeat": asdict(self.heartbeat) if self.heartbeat else None,
                "heartbeat_age_s": round(self.heartbeat.age(), 1) if self.heartbeat else None,
                "goodput": self.goodput.as_dict() if self.goodput is not None else None,
                "lease": asdict(self.lease) if self.lease else None, "recoveries": self.recoveries,
                "events": [asdict(e) for e in self.events],
                "last_error": asdict(self.last_error) if self.last_error else None,
                "role_to_grant": self.role_to_grant, "read_error": self.read_error}


def host_of(provider: Provider) -> GuardHost | None:
    """The provider's guard host, or None where this build has none (so `status` and `down` go on)."""
    try:
        return provider.guard_host()
    except UsageError:
        return None


def guard_report(ctx: Context, state: ClusterState, spec: Spec | None, last: int = 5) -> GuardReport | None:
    """The guard's report; None when this cluster never had a guard nor a watch holding its lease."""
    store = guard_store(ctx, state, spec)
    host = host_of(ctx.provider_for(spec, state))
    info = host.describe(state.name) if host is not None else None
    if store is None:
        return None if info is None else GuardReport(state.name, info, None, None, 0, (), None,
                                                      host_known=host is not None)
    try:
        ledger = Ledger(store)
        heartbeat = ledger.heartbeat()
        lease = read_lease(store)[0]
        events = [event for _, event in ledger.events()]
    except TpuopsError as err:  # the bucket unreadable: worth a line only where a guard is known to exist
        return None if info is None else GuardReport(state.name, info, None, None, 0, (), None, read_error=err.message,
                                                      host_known=host is not None)
    if info is None and heartbeat is None and not events:
        return None
    errors = [event for event in events if event.data.get("error")]
    recoveries = sum(1 for event in events if event.kind == RESTART_KIND)
    run = state.current_run
    return GuardReport(state.name, info, heartbeat, lease, recoveries, tuple(events[-last:]),
                       errors[-1] if errors else None, host_known=host is not None, current_run=run.id if run else None)
