"""The guard's ledger in the run's bucket (`gs://BUCKET/.tpuops/NAME/guard/`), read by `status`, `guard logs`
and a laptop's `watch` without reaching the guard itself:

- `events/<time>-<holder>.json`: one object per event (GCS has no append, and one object per event never has
  two writers): preemptions, recoveries with the time they took and the steps they lost, the end of the run;
- `heartbeat.json`: rewritten every minute: who holds the lease, the run, its last step, and the goodput so
  far: the wall clock since the guard began counting, in buckets that add up to it (guard/goodput.py).
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from tpuops.cloud.blob_types import BlobNotFound, BlobStore
from tpuops.errors import TpuopsError
from tpuops.guard.goodput import Goodput, Mark, Tick, observe

HEARTBEAT_BLOB = "heartbeat.json"
EVENTS_PREFIX = "events/"


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
class Heartbeat:
    ts: float
    holder: str
    role: str
    run_id: str | None = None
    step: int | None = None
    tpu_state: str | None = None
    recoveries: int = 0
    steps_lost: int = 0
    goodput: Goodput = field(default_factory=Goodput)  # guard/goodput.py: where the run's time went
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
        values["goodput"] = Goodput.from_json(data.get("goodput"))
        return cls(**values)


class Ledger:
    """Writes and reads the ledger over the guard's blob store."""

    def __init__(self, store: BlobStore, holder: str = "", clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.holder = holder
        self.clock = clock
        self._seq = 0

    def append(self, kind: str, message: str, **data: Any) -> LedgerEvent:
        event = LedgerEvent(self.clock(), kind, message, self.holder, data)
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


class Progress:
    """What the guard counts between heartbeats: the goodput tally (guard/goodput.py), fed the watch's polls and
    the ledger's events as they happen, from the watch's thread and the lease keeper's."""

    def __init__(self, goodput: Goodput | None = None) -> None:
        self.goodput = goodput or Goodput()
        self._lock = threading.Lock()

    @classmethod
    def resumed(cls, heartbeat: Heartbeat | None) -> Progress:
        """Counting goes on from the last heartbeat (a guard killed and started again keeps its numbers; the
        interval it was away goes to the bucket it was in)."""
        return cls(heartbeat.goodput if heartbeat is not None else None)

    @property
    def step(self) -> int | None:
        return self.goodput.step

    @property
    def recoveries(self) -> int:
        return self.goodput.recoveries

    @property
    def steps_lost(self) -> int:
        return self.goodput.steps_lost

    def tick(self, now: float, tpu_state: str | None = None) -> None:
        self._observe(Tick(now, tpu_state))

    def event(self, kind: str, data: dict[str, Any], now: float) -> None:
        self._observe(Mark(now, kind, data))

    def steps_seen(self, steps: list[int], now: float) -> dict[str, Any] | None:
        """New steps from the scalars; after a relaunch the first of them closes the recovery: what it cost."""
        if not steps:
            return None
        with self._lock:
            before = self.goodput
            self.goodput = observe(before, Tick(now, None, tuple(steps)))
            after = self.goodput
        if after.recoveries == before.recoveries:
            return None
        waited = now - before.disrupted_at if before.disrupted_at is not None else 0.0
        return {"step_before": before.step_before, "first_step_after": min(steps),
                "steps_lost": after.steps_lost - before.steps_lost, "seconds_to_recover": round(waited, 1)}

    def _observe(self, seen: Tick | Mark) -> None:
        with self._lock:
            self.goodput = observe(self.goodput, seen)


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
