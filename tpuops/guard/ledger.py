"""The guard's ledger in the run's bucket (`gs://BUCKET/.tpuops/NAME/guard/`), read by `status`, `guard logs`
and a laptop's `watch` without reaching the guard itself:

- `events/<time>-<holder>.json`: one object per event (GCS has no append, and one object per event never has
  two writers): preemptions, recoveries with the time they took and the steps they lost, the end of the run;
- `heartbeat.json`: rewritten every minute: who holds the lease, the run, its last step, and the goodput so
  far (hours paid, hours in which steps advanced, hours lost to preemption, hangs and recovery).

Goodput is counted by the guard between heartbeats: an interval is paid while the TPU is READY, advancing
when the run's last step grew in it, lost while a recovery is under way (from the preemption seen to the first
step after the relaunch). Time the guard itself was down is not counted at all.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from tpuops.cloud.blob_types import BlobNotFound, BlobStore
from tpuops.durations import format_duration
from tpuops.errors import TpuopsError

HEARTBEAT_BLOB = "heartbeat.json"
EVENTS_PREFIX = "events/"
HOUR = 3600.0


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class LedgerEvent:
    ts: float  # seconds since the epoch
    kind: str  # watch, observe, trouble, recovery, restart, preemption, recovered, gave-up, ended, error, ...
    message: str
    holder: str = ""
    data: dict[str, Any] = field(default_factory=dict)  # steps_lost, seconds_to_recover, step_before, ...

    @property
    def at(self) -> str:
        return iso(self.ts)

    def line(self) -> str:
        return f"{self.at} {self.kind}: {self.message}"


@dataclass
class Goodput:
    paid_s: float = 0.0
    advancing_s: float = 0.0
    lost_s: float = 0.0

    def line(self) -> str:
        share = f" ({100 * self.advancing_s / self.paid_s:.0f}%)" if self.paid_s > 0 else ""
        return (f"goodput so far: {hours(self.paid_s)} paid, {hours(self.advancing_s)} with steps advancing{share}, "
                f"{hours(self.lost_s)} lost to preemption, hangs and recovery")


def hours(seconds: float) -> str:
    """2.35h from an hour on (what a bill counts in), 12m or 40s below."""
    return f"{seconds / HOUR:.2f}h" if seconds >= HOUR else format_duration(seconds)


@dataclass
class Heartbeat:
    ts: float
    holder: str
    role: str
    run_id: str | None = None
    step: int | None = None
    tpu_state: str | None = None
    recoveries: int = 0
    steps_lost: int = 0
    goodput: Goodput = field(default_factory=Goodput)
    interval: float = 60.0  # how often the holder writes it: "alive" is judged against this
    idle: str | None = None  # a guard between runs: what it waits for (guard/heartbeat.py)
    stopped: str | None = None  # the holder's last beat, written on its way out: why it stopped

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.ts)

    def alive(self, now: float | None = None) -> bool:
        """A holder that said it stopped is not alive, however fresh its last beat; one that beats on time is.
        One late beat is tolerated (the writer beats at its lease renewals, a poll apart), a second is not."""
        return self.stopped is None and self.age(now) <= 2 * self.interval

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Heartbeat:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["goodput"] = Goodput(**data.get("goodput", {}))
        return cls(**values)


class Ledger:
    """Writes and reads the ledger over the guard's blob store."""

    def __init__(self, store: BlobStore, holder: str = "") -> None:
        self.store = store
        self.holder = holder
        self._seq = 0

    def append(self, kind: str, message: str, **data: Any) -> LedgerEvent:
        event = LedgerEvent(time.time(), kind, message, self.holder, data)
        self._seq += 1
        # Time first (the listing's order), then the writer and a counter: two writers never pick one name.
        tag = f"{zlib.crc32(self.holder.encode()):08x}"
        name = f"{EVENTS_PREFIX}{int(event.ts * 1e6):017d}-{tag}-{self._seq:04d}.json"
        self.store.write_bytes(name, json.dumps(asdict(event)).encode())
        return event

    def events(self, after: str = "") -> list[tuple[str, LedgerEvent]]:
        """(blob name, event) of every event whose name sorts after `after`, oldest first."""
        names = sorted(info.name for info in self.store.list(EVENTS_PREFIX) if info.name > after)
        found = []
        for name in names:
            try:
                data = json.loads(self.store.read_versioned(name).data)
                found.append((name, LedgerEvent(**data)))
            except (BlobNotFound, ValueError, TypeError):
                continue  # deleted meanwhile, or not ours to read
        return found

    def write_heartbeat(self, heartbeat: Heartbeat) -> None:
        self.store.write_bytes(HEARTBEAT_BLOB, json.dumps(asdict(heartbeat)).encode())

    def heartbeat(self) -> Heartbeat | None:
        try:
            return Heartbeat.from_json(json.loads(self.store.read_versioned(HEARTBEAT_BLOB).data))
        except (BlobNotFound, ValueError, TypeError):
            return None


@dataclass
class Progress:
    """What the guard counts between heartbeats: the run's last step, recoveries, and the goodput clock."""

    goodput: Goodput = field(default_factory=Goodput)
    step: int | None = None  # the highest step seen in the run's scalars
    tpu_ready: bool = False
    recoveries: int = 0
    steps_lost: int = 0
    recovering_since: float | None = None  # a preemption was seen; no step since the relaunch yet
    step_before: int | None = None  # the last step before that preemption
    relaunched: bool = False
    _last_tick: float | None = None
    _step_at_last_tick: int | None = None

    @classmethod
    def resumed(cls, heartbeat: Heartbeat | None) -> Progress:
        """Counting goes on from the last heartbeat (a guard killed and started again keeps its numbers)."""
        if heartbeat is None:
            return cls()
        return cls(goodput=heartbeat.goodput, step=heartbeat.step, recoveries=heartbeat.recoveries,
                   steps_lost=heartbeat.steps_lost)

    def tick(self, now: float) -> None:
        if self._last_tick is not None:
            elapsed = max(0.0, now - self._last_tick)
            if self.tpu_ready:
                self.goodput.paid_s += elapsed
            if self.step is not None and self._step_at_last_tick is not None and self.step > self._step_at_last_tick:
                self.goodput.advancing_s += elapsed
            if self.recovering_since is not None:
                self.goodput.lost_s += elapsed
        self._last_tick, self._step_at_last_tick = now, self.step

    def preempted(self, now: float, already_lost: float = 0.0) -> None:
        """A recovery begins; `already_lost`: the time a hang made no progress before it was confirmed, which the
        ticks counted as paid but not advancing, and which is lost as surely as the recovery that follows."""
        if self.recovering_since is None:
            self.recovering_since, self.step_before, self.relaunched = now, self.step, False
            self.goodput.lost_s += already_lost

    def steps_seen(self, steps: list[int], now: float) -> dict[str, Any] | None:
        """New steps from the scalars; after a relaunch the first of them closes the recovery: what it cost."""
        if not steps:
            return None
        closed = None
        if self.recovering_since is not None and self.relaunched:
            first = min(steps)
            lost = max(0, self.step_before - first + 1) if self.step_before is not None else 0
            closed = {"step_before": self.step_before, "first_step_after": first, "steps_lost": lost,
                      "seconds_to_recover": round(now - self.recovering_since, 1)}
            self.recoveries += 1
            self.steps_lost += lost
            self.recovering_since, self.step_before, self.step = None, None, max(steps)
            return closed
        self.step = max([*steps, *([self.step] if self.step is not None else [])])
        return closed


def role_for(message: str) -> str | None:
    """The role to grant when a guard's error is a permission denial (HTTP 403), by the API that denied it."""
    text = message.lower()
    if "403" not in text and "permission" not in text and "forbidden" not in text:
        return None
    if "actas" in text or "serviceaccount" in text.replace(" ", ""):
        return "roles/iam.serviceAccountUser"
    if "storage" in text or "bucket" in text or "gs://" in text:
        return "roles/storage.objectAdmin (on the bucket)"
    if "instance" in text or "compute" in text:
        return "roles/compute.instanceAdmin.v1"
    return "roles/tpu.admin"


def read_safely(ledger: Ledger) -> tuple[Heartbeat | None, list[LedgerEvent], str | None]:
    """Heartbeat and events for `status`, or the error that kept them from being read."""
    try:
        return ledger.heartbeat(), [event for _, event in ledger.events()], None
    except TpuopsError as err:
        return None, [], err.message
