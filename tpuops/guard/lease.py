"""One recoverer at a time: a lease object in the run's bucket, `gs://BUCKET/.tpuops/NAME/guard/lease.json`.

Whoever recovers the run (the guard, or a laptop's `tpuops watch` when no guard runs) holds the lease and
renews it every poll. It is only ever written through the store's compare-and-swap (GCS `if_generation_match`;
a lock and a counter in the local provider's directory): create-if-absent to take a free lease, the generation
just read to renew, release or take over. A lease whose holder stayed silent for `STALE_POLLS` of its own polls
is stale and may be taken over, again only through the precondition, so two takers never both win.

A holder's id is stable across its restarts (the guard's is its host's name, not its pid), so a guard killed
and started again finds its own lease and goes on with it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from tpuops.cloud.blob_types import BlobNotFound, BlobStore, PreconditionFailed
from tpuops.errors import TpuopsError

LEASE_BLOB = "lease.json"  # in the guard's store (gs://BUCKET/.tpuops/NAME/guard/)
STALE_POLLS = 3
Clock = Callable[[], float]


@dataclass(frozen=True)
class LeaseRecord:
    holder: str | None  # None: released
    role: str  # "guard" | "watch": how a viewer names who recovers
    renewed_at: float  # seconds since the epoch, by the holder's clock
    poll_interval: float  # the holder's; staleness is counted in its polls
    acquired_at: float = 0.0

    def live(self, now: float) -> bool:
        return self.holder is not None and now - self.renewed_at <= STALE_POLLS * self.poll_interval

    def silent_for(self, now: float) -> float:
        return max(0.0, now - self.renewed_at)

    def describe(self, now: float) -> str:
        if self.holder is None:
            return "free (released)"
        state = "live" if self.live(now) else "stale"
        return f"{state}, held by {self.role} {self.holder} (renewed {self.silent_for(now):.0f}s ago)"


def read_lease(store: BlobStore) -> tuple[LeaseRecord | None, int]:
    """The lease and its generation (0 when there is none, which is what a create-if-absent matches)."""
    try:
        blob = store.read_versioned(LEASE_BLOB)
    except BlobNotFound:
        return None, 0
    try:
        return LeaseRecord(**json.loads(blob.data)), blob.generation
    except (ValueError, TypeError):
        return None, blob.generation  # unreadable: treat as free, but still only take it through the precondition


class LeaseLost(TpuopsError):
    """Another holder has the lease now: this one must not recover."""


@dataclass
class Lease:
    """This process's side of the lease."""

    store: BlobStore
    holder: str
    role: str
    poll_interval: float
    clock: Clock = time.time
    generation: int | None = None  # of the record we wrote last; None while we do not hold it
    acquired_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # the keeper's thread and ours

    @property
    def held(self) -> bool:
        return self.generation is not None

    def try_acquire(self) -> LeaseRecord | None:
        """Take the lease if it is free, stale or already ours. Returns None when we hold it now, else the
        live record of the one who does."""
        record, generation = read_lease(self.store)
        now = self.clock()
        if record is not None and record.holder != self.holder and record.live(now):
            self.generation = None
            return record
        # Our own lease (we restarted) keeps its acquisition time: the holder never changed.
        if record is not None and record.holder == self.holder:
            self.acquired_at = record.acquired_at or now
        else:
            self.acquired_at = now
        try:
            self.generation = self._write(now, generation)
        except PreconditionFailed:  # someone else took it between our read and write
            self.generation = None
            again, _ = read_lease(self.store)
            return again if again is not None and again.holder != self.holder else self.try_acquire()
        return None

    def renew(self) -> None:
        """Write our record again on top of the one we wrote last; LeaseLost if someone took it over."""
        with self._lock:
            self._renew()

    def _renew(self) -> None:
        if self.generation is None:
            raise LeaseLost("the lease is not held")
        try:
            self.generation = self._write(self.clock(), self.generation)
        except PreconditionFailed as err:
            record, generation = read_lease(self.store)
            if record is not None and record.holder == self.holder:  # our own write, its answer lost: keep it
                self.generation = generation
                return
            self.generation = None
            who = f"{record.role} {record.holder}" if record and record.holder else "nobody"
            raise LeaseLost(f"the lease was taken over by {who}") from err

    def release(self) -> None:
        """Leave the lease free for the next recoverer (only if it is still ours)."""
        if self.generation is None:
            return
        record = LeaseRecord(None, self.role, self.clock(), self.poll_interval)
        # Taken over already, or the bucket unreachable: then it goes stale by itself.
        with contextlib.suppress(TpuopsError):
            self.store.write_bytes(LEASE_BLOB, json.dumps(asdict(record)).encode(),
                                   if_generation_match=self.generation)
        self.generation = None

    def _write(self, now: float, generation: int) -> int:
        record = LeaseRecord(self.holder, self.role, now, self.poll_interval, self.acquired_at)
        return self.store.write_bytes(LEASE_BLOB, json.dumps(asdict(record)).encode(), if_generation_match=generation)


class LeaseKeeper:
    """Renews a held lease every poll from a thread of its own, so a recovery that waits an hour for capacity
    keeps it; `lost` is set the moment another holder has it, and `tick` runs after each renewal (the guard's
    heartbeat). A renewal that fails for a passing reason (GCS briefly away) is tried again next time."""

    def __init__(self, lease: Lease, tick: Callable[[], None] | None = None,
                 on_error: Callable[[str], None] | None = None) -> None:
        self.lease = lease
        self.tick = tick
        self.on_error = on_error
        self.lost: LeaseLost | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tpuops-lease", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def check(self) -> None:
        """Raise LeaseLost if another holder has the lease: called before every recovery."""
        if self.lost is not None:
            raise self.lost

    def _loop(self) -> None:
        while not self._stop.wait(self.lease.poll_interval):
            try:
                self.lease.renew()
            except LeaseLost as err:
                self.lost = err
                return
            except TpuopsError as err:
                if self.on_error:
                    self.on_error(f"could not renew the lease: {err.message}")
            if self.tick is not None:
                try:
                    self.tick()
                except TpuopsError as err:
                    if self.on_error:
                        self.on_error(f"could not write the heartbeat: {err.message}")
