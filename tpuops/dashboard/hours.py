"""Where the hours went, for a time range: a cluster's ledger replayed through the goodput fold into a timeline,
clipped to the range, in chip-hours and dollars at list price.

The guard counts live from its own polls (the heartbeat's tally, which `status` shows); afterwards the ledger
holds its events and the event files hold each step's wall time, and those two are enough to replay the run's
life: the events are the fold's marks, the scalars' wall times its ticks. Pure functions; the catalog's facts
(chips, price per hour) come in as numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tpuops.guard.goodput import BUCKETS, Goodput, Mark, Segment, Tick, clip, observe, until

HOUR = 3600.0


@dataclass(frozen=True)
class Timeline:
    segments: tuple[Segment, ...]
    tally: Goodput


def timeline(events: Iterable[Any], steps: Iterable[tuple[float, int]], now: float) -> Timeline:
    """The run's life from its ledger events (objects with ts, kind, data) and (wall time, step) pairs, up to
    `now` (a run still going is counted to now, in the bucket it is in)."""
    observations: list[Tick | Mark] = [Mark(event.ts, event.kind, dict(event.data)) for event in events]
    observations += [Tick(wall, None, (step,)) for wall, step in steps]
    observations.sort(key=lambda seen: (seen.ts, isinstance(seen, Tick)))  # an event before a step at its time
    segments: list[Segment] = []
    tally = Goodput()
    for seen in observations:  # a new watch after an end: the segments go on, the tally is the new run's
        tally = observe(tally, seen, segments)
    tally = until(tally, now, segments)
    return Timeline(tuple(segments), tally)


@dataclass(frozen=True)
class Price:
    chips: int
    per_hour: float  # dollars per hour of the whole TPU at list price (0: not in the catalog, or free)
    free: str | None = None  # why it costs nothing, said where a price would be ("simulator"), as `status` does


def hours_of(segments: Sequence[Segment], start: float, end: float, price: Price) -> dict[str, Any]:
    """Per bucket within [start, end]: seconds, chip-hours (the TPU's chips over that time), and dollars at
    list price for the part of it the TPU was held (waiting for capacity costs nothing)."""
    seconds = clip(segments, start, end)
    paid = clip([s for s in segments if s.paid], start, end)
    rows = {bucket: _row(seconds[bucket], paid[bucket], price) for bucket in BUCKETS}
    rows["paid"] = _row(seconds["paid"], seconds["paid"], price)
    rows["wall"] = _row(sum(seconds[b] for b in BUCKETS), seconds["paid"], price)
    return rows


def _row(seconds: float, paid_seconds: float, price: Price) -> dict[str, Any]:
    row: dict[str, Any] = {"seconds": round(seconds, 1), "chip_hours": round(seconds / HOUR * price.chips, 4),
                           "dollars": 0.0 if price.free else round(paid_seconds / HOUR * price.per_hour, 2)}
    return {**row, "free": price.free} if price.free else row


def total(per_cluster: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The rows of every cluster added up; free (and why) only when every cluster's is, for the same reason."""
    summed: dict[str, dict[str, Any]] = {}
    reasons: dict[str, set[str | None]] = {}
    for rows in per_cluster:
        for key, row in rows.items():
            into = summed.setdefault(key, {"seconds": 0.0, "chip_hours": 0.0, "dollars": 0.0})
            for field_name in ("seconds", "chip_hours", "dollars"):
                into[field_name] = round(into[field_name] + row[field_name], 4)
            reasons.setdefault(key, set()).add(row.get("free"))
    for key, why in reasons.items():
        if len(why) == 1 and None not in why:
            summed[key]["free"] = next(iter(why))
    return summed
