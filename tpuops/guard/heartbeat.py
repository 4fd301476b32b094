"""The guard's heartbeat in the ledger (`heartbeat.json`): what `status` judges "alive" by.

While it watches a run, the lease holder writes it every `interval` seconds with the run, its last step and the
goodput (`HeartbeatWriter`, ticked at every lease renewal). Between runs (before the first launch, or after a run
ended or was given up on) the guard holds no lease but is still there, waiting for the next launch: it keeps
beating, marked idle with what it waits for (`IdleHeartbeat`), so `status` does not call a waiting guard dead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tpuops.errors import TpuopsError
from tpuops.guard.lease import Lease, read_lease
from tpuops.guard.ledger import Heartbeat, Ledger, Progress

HEARTBEAT_ENV = "TPUOPS_GUARD_HEARTBEAT"  # seconds between heartbeats (default a minute; tests shrink it)
HEARTBEAT_S = 60.0


def heartbeat_interval(env: Mapping[str, str]) -> float:
    return float(env.get(HEARTBEAT_ENV) or HEARTBEAT_S)


@dataclass
class HeartbeatWriter:
    """Counts goodput every lease renewal and writes the heartbeat every `interval` seconds."""

    ledger: Ledger
    progress: Progress
    lease: Lease
    interval: float
    run_id: str | None = None
    tpu_state: str | None = None
    _last: float = 0.0

    def tick(self, force: bool = False, stopped: str | None = None) -> None:
        """`stopped`: this is the holder's last beat (it is on its way out), and why."""
        now = time.time()
        self.progress.tick(now)
        if not force and now - self._last < self.interval:
            return
        self._last = now
        heartbeat = Heartbeat(now, self.lease.holder, self.lease.role, self.run_id, self.progress.step,
                              self.tpu_state, self.progress.recoveries, self.progress.steps_lost,
                              self.progress.goodput, self.interval, stopped=stopped)
        try:
            self.ledger.write_heartbeat(heartbeat)
        except TpuopsError:
            if force:
                return  # the last one, on the way out: the bucket unreachable must not hide why we stop
            raise


@dataclass
class IdleHeartbeat:
    """The heartbeat of a guard with no run to watch. It keeps the counts of the last heartbeat (goodput, steps
    lost, recoveries: the last run's, until the next one starts) and is not written while another live holder
    has the lease (a laptop watch recovering meanwhile owns the heartbeat)."""

    ledger: Ledger
    holder: str
    interval: float
    _last: float = 0.0

    def tick(self, waiting_for: str) -> None:
        now = time.time()
        if now - self._last < self.interval:
            return
        self._last = now
        try:
            record = read_lease(self.ledger.store)[0]
            if record is not None and record.holder != self.holder and record.live(now):
                return
            last = self.ledger.heartbeat()
            base = last if last is not None else Heartbeat(now, self.holder, "guard")
            self.ledger.write_heartbeat(replace(base, ts=now, holder=self.holder, role="guard", tpu_state=None,
                                                interval=self.interval, idle=waiting_for, stopped=None))
        except TpuopsError:
            return  # the bucket away for now: the next tick tries again (status would say dead meanwhile)

