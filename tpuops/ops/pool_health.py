"""Pool health from the user's own history: how often each pool preempted the clusters of this machine, and how
long getting capacity there took, read from the clusters' recorded events (no cloud call). `tpuops quota` shows
it; `tpu.order: health` tries the healthiest pools first.

Recorded by the workflows that see it happen: a recovery from a dead TPU logs a `preempted` event with its pool
(ops/watch.py), placing a TPU logs a `placed` event with its pool and the seconds it took (ops/placement.py). The
facts are the events' fields, never their text (state/__init__.py reads older events' text once, when loaded).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from tpuops.spec.pools import PoolSpec
from tpuops.state import PLACED_EVENT, PREEMPTED_EVENT, ClusterState, StateStore, epoch_seconds

WINDOW_S = 7 * 86400.0  # preemptions per day are counted over the last week


@dataclass(frozen=True)
class PoolHealth:
    pool: str  # a pool's label
    preemptions: int  # within WINDOW_S
    days: float  # the span they were counted over (at most WINDOW_S, from the pool's first event)
    capacity_seconds: float | None  # median time to get a TPU there (None: never placed there)
    placements: int

    @property
    def preemptions_per_day(self) -> float:
        return self.preemptions / max(self.days, 1.0)

    def line(self) -> str:
        waited = "-" if self.capacity_seconds is None else f"{self.capacity_seconds:.0f}s"
        over = f"{self.days:.1f} day(s)" if self.days >= 1.0 else f"{self.days:.1f} day(s), taken as 1"
        return (f"{self.pool:<36} {self.preemptions_per_day:5.2f} preemptions/day ({self.preemptions} in "
                f"{over}), capacity in {waited} (median of {self.placements})")

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "preemptions_per_day": round(self.preemptions_per_day, 3)}


def placed_line(pool: str, seconds: float) -> str:
    """A `placed` event's message, for people: its facts are the event's `pool` and `seconds`."""
    return f"in pool {pool} after {seconds:.1f}s"


def history(store: StateStore) -> list[ClusterState]:
    return [state for name in store.names() if (state := store.load(name)) is not None]


def pool_health(states: Iterable[ClusterState], now: float | None = None) -> list[PoolHealth]:
    """Every pool these clusters' events name, healthiest first."""
    now = time.time() if now is None else now
    preempted: dict[str, list[float]] = {}
    placed: dict[str, list[tuple[float, float]]] = {}
    for state in states:
        for event in state.events:
            at = epoch_seconds(event.at) or now
            if event.pool is None:
                continue
            if event.kind == PREEMPTED_EVENT:
                preempted.setdefault(event.pool, []).append(at)
            elif event.kind == PLACED_EVENT and event.seconds is not None:
                placed.setdefault(event.pool, []).append((at, event.seconds))
    found = []
    for pool in sorted(set(preempted) | set(placed)):
        times = [at for at in preempted.get(pool, []) if now - at <= WINDOW_S]
        first = min([*preempted.get(pool, []), *(at for at, _ in placed.get(pool, []))], default=now)
        waits = [seconds for _, seconds in placed.get(pool, [])]
        found.append(PoolHealth(pool, len(times), min(now - first, WINDOW_S) / 86400.0,
                                statistics.median(waits) if waits else None, len(waits)))
    return sorted(found, key=health_key)


def health_key(health: PoolHealth) -> tuple[float, float]:
    return (health.preemptions_per_day, health.capacity_seconds if health.capacity_seconds is not None else 0.0)


def by_health(pools: Sequence[PoolSpec], states: Iterable[ClusterState], now: float | None = None) -> list[PoolSpec]:
    """The pools, fewest preemptions per day first, then quickest to get capacity; a pool without history keeps
    its place among those that tie (the order written is the tie-break)."""
    known = {health.pool: health_key(health) for health in pool_health(states, now)}
    return sorted(pools, key=lambda pool: known.get(pool.label, (0.0, 0.0)))
