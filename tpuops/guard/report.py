"""What `tpuops guard status` and the `guard:` line of `tpuops status` show, read from the ledger and the lease
in the bucket (never from the guard itself: a dead guard must still be reported, and why)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tpuops.access.guard_place import guard_store
from tpuops.context import Context
from tpuops.durations import format_duration
from tpuops.errors import TpuopsError, UsageError
from tpuops.guard.lease import LeaseRecord, read_lease
from tpuops.guard.ledger import Goodput, Heartbeat, Ledger, LedgerEvent, role_for
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

    @property
    def goodput(self) -> Goodput | None:
        return self.heartbeat.goodput if self.heartbeat else None

    @property
    def alive(self) -> bool:
        return self.heartbeat is not None and self.heartbeat.role == "guard" and self.heartbeat.alive()

    @property
    def role_to_grant(self) -> str | None:
        return role_for(self.last_error.message) if self.last_error else None

    def state_line(self) -> str:
        """alive / dead / stopped, with the heartbeat's age and where the guard runs."""
        where = f"{self.host.kind} {self.host.name}" if self.host else "no guard host"
        if self.heartbeat is None:
            state = "no heartbeat yet" if self.host and self.host.state == "running" else "not running"
            return f"{state} ({where})"
        age = format_duration(self.heartbeat.age())
        who = self.heartbeat.role if self.heartbeat.role != "guard" else ""
        if self.heartbeat.alive() and self.heartbeat.idle:
            return f"alive, idle: waiting for {self.heartbeat.idle} (heartbeat {age} ago; {where})"
        if self.heartbeat.alive():
            return f"alive (heartbeat {age} ago{', from ' + who if who else ''}; {where})"
        if self.events and self.events[-1].kind == "ended":
            return f"done: the run ended ({self.events[-1].message}) {age} ago"
        return f"dead: last heartbeat {age} ago ({where}); `tpuops guard up {self.cluster}` brings it back"

    def summary(self) -> str:
        """The `guard:` line of `tpuops status`."""
        parts = [self.state_line(), f"{self.recoveries} recover{'y' if self.recoveries == 1 else 'ies'}"]
        if self.heartbeat is not None and self.heartbeat.steps_lost:
            parts.append(f"{self.heartbeat.steps_lost} step(s) lost")
        if self.goodput is not None:
            parts.append(self.goodput.line())
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "alive": self.alive, "host": asdict(self.host) if self.host else None,
                "heartbeat": asdict(self.heartbeat) if self.heartbeat else None,
                "heartbeat_age_s": round(self.heartbeat.age(), 1) if self.heartbeat else None,
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
        return None if info is None else GuardReport(state.name, info, None, None, 0, (), None)
    try:
        ledger = Ledger(store)
        heartbeat = ledger.heartbeat()
        lease = read_lease(store)[0]
        events = [event for _, event in ledger.events()]
    except TpuopsError as err:  # the bucket unreadable: worth a line only where a guard is known to exist
        return None if info is None else GuardReport(state.name, info, None, None, 0, (), None, read_error=err.message)
    if info is None and heartbeat is None and not events:
        return None
    errors = [event for event in events if event.data.get("error")]
    recoveries = sum(1 for event in events if event.kind == RESTART_KIND)
    return GuardReport(state.name, info, heartbeat, lease, recoveries, tuple(events[-last:]),
                       errors[-1] if errors else None)
