"""Where a run's time went, in buckets that add up: a pure fold over what the guard observes.

Every interval of a run's life, from the first observation to the last (or to the run's end), falls in exactly
one bucket, so the buckets add up to the wall clock and no share exceeds 100%:

    waiting       no TPU, waiting for capacity: a recovery's re-creation from the first zone found full (or its
                  queued resource waiting) until the TPU is created (the create that finally works included)
    provisioning  the TPU being deleted and created again
    setup         the TPU ready, the run being pushed and launched
    first_step    launched, no step seen yet (imports, data, compilation)
    advancing     steps advancing, and kept so far
    lost          steps computed and then lost to a preemption (those since the last checkpoint); moved here
                  from `advancing` when the first step after the relaunch shows where the run resumed
    recovery      from the poll that saw the TPU gone (or a hang confirmed) to the next phase of the relaunch
    hang          a hang's time without a new step before the watchdog confirmed it; moved from `advancing`

Beside the buckets, `paid_s` counts the intervals that began with the TPU READY (the time it was held and
billed). The run-phase buckets (setup, first step, advancing, lost, hang) only grow on a READY TPU, so

    scheduling goodput = paid / wall          (the TPU held over the time it was wanted)
    runtime goodput    = advancing / paid     (steps advanced and kept, over the time held)

are shares in [0, 1]. The fold is pure (`observe(goodput, observation) -> goodput`, with the clock in each
observation), so the guard counts live with it, tests replay arbitrary histories through it, and the dashboard
replays a ledger (its events, the scalars' wall times as ticks) into a timeline of `Segment`s.

This module imports nothing of the guard: the ledger's Heartbeat carries a `Goodput`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from tpuops.durations import format_duration

BUCKETS = ("waiting", "provisioning", "setup", "first_step", "advancing", "lost", "recovery", "hang")
RUN_PHASES = frozenset({"setup", "first_step", "advancing"})  # phases that need a READY TPU
READY = "READY"
OVER = "over"  # the run ended: nothing is counted after it
# The guard's notes when a recovery begins carry `step_before` (the watchdog's own "hang" events, suspicions and
# all-clears, carry none and change nothing here).
DISRUPTIONS = frozenset({"preemption", "failure", "hang"})
ENDS = frozenset({"ended", "gave-up"})
HOUR = 3600.0


@dataclass(frozen=True)
class Tick:
    """A poll: the TPU's state when it was read (None: not read this time), the new steps seen."""

    ts: float
    tpu_state: str | None = None
    steps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Mark:
    """A ledger event (kind and data as the guard records them)."""

    ts: float
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)


Observation = Tick | Mark


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    bucket: str
    paid: bool


@dataclass(frozen=True)
class Goodput:
    """The running tally (what a heartbeat carries, so a guard started again goes on counting)."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    paid_s: float = 0.0
    started: float | None = None
    last: float | None = None
    phase: str | None = None  # None: nothing observed yet
    ready: bool = False
    step: int | None = None  # the highest step seen
    attempt_first_step: int | None = None  # the first step this attempt showed (the rate of steps lost)
    attempt_advancing_s: float = 0.0
    step_before: int | None = None  # the last step before the disruption being recovered from
    disrupted_at: float | None = None
    relaunched: bool = False
    recoveries: int = 0
    steps_lost: int = 0

    # ---------------------------------------------------------------------------------------------- shares
    @property
    def wall_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def advancing_s(self) -> float:
        return self.seconds["advancing"]

    @property
    def badput_s(self) -> float:
        return self.wall_s - self.advancing_s

    @property
    def scheduling(self) -> float | None:
        return _share(self.paid_s, self.wall_s)

    @property
    def runtime(self) -> float | None:
        return _share(self.advancing_s, self.paid_s)

    @property
    def overall(self) -> float | None:
        return _share(self.advancing_s, self.wall_s)

    def line(self) -> str:
        """The `goodput:` part of `status` and `guard status`."""
        if self.wall_s <= 0:
            return "goodput: nothing counted yet"
        runtime = f" ({_percent(self.runtime)} runtime goodput)" if self.paid_s > 0 else ""
        badput = ", ".join(f"{hours(self.seconds[b])} {label(b)}" for b in BUCKETS
                           if b != "advancing" and self.seconds[b] >= 1)
        return (f"goodput so far: {hours(self.wall_s)} wanted, {hours(self.paid_s)} paid "
                f"({_percent(self.scheduling)} scheduling goodput), {hours(self.advancing_s)} with steps "
                f"advancing{runtime}" + (f"; badput: {badput}" if badput else ""))

    def as_dict(self) -> dict[str, Any]:
        """The tally and its shares, rounded for reading (what `status --json`, `guard status --json` and the
        dashboard show; a heartbeat keeps the exact tally)."""
        shares = {"scheduling_goodput": self.scheduling, "runtime_goodput": self.runtime, "goodput": self.overall}
        return {**asdict(self), "seconds": {b: round(v, 1) for b, v in self.seconds.items()},
                "paid_s": round(self.paid_s, 1), "wall_s": round(self.wall_s, 1), "badput_s": round(self.badput_s, 1),
                "advancing_s": round(self.advancing_s, 1), "attempt_advancing_s": round(self.attempt_advancing_s, 1),
                **{k: None if v is None else round(v, 4) for k, v in shares.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Goodput:
        """A heartbeat's tally; one from an older guard ({paid_s, advancing_s, lost_s}) becomes a tally that
        still adds up (its unexplained rest in `recovery`), never one whose shares exceed 100%."""
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}
        if "seconds" not in data:
            paid, advancing = float(data.get("paid_s", 0.0)), float(data.get("advancing_s", 0.0))
            advancing = min(advancing, paid)
            seconds = dict.fromkeys(BUCKETS, 0.0)
            seconds["advancing"], seconds["recovery"] = advancing, max(0.0, float(data.get("lost_s", 0.0)))
            seconds["first_step"] = max(0.0, paid - advancing)
            return cls(seconds=seconds, paid_s=paid)
        values = {key: value for key, value in data.items() if key in known}
        values["seconds"] = {**dict.fromkeys(BUCKETS, 0.0), **{k: float(v) for k, v in data["seconds"].items()
                                                                if k in BUCKETS}}
        return cls(**values)


def label(bucket: str) -> str:
    return {"waiting": "waiting for capacity", "first_step": "to the first step", "lost": "lost to preemption",
            "recovery": "recovering", "hang": "hung"}.get(bucket, bucket)


def hours(seconds: float) -> str:
    """2.35h from an hour on (what a bill counts in), 12m or 40s below."""
    return f"{seconds / HOUR:.2f}h" if seconds >= HOUR else format_duration(seconds)


def _share(part: float, whole: float) -> float | None:
    return min(1.0, max(0.0, part / whole)) if whole > 0 else None


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


# -------------------------------------------------------------------------------------------------- the fold


def observe(tally: Goodput, seen: Observation, segments: list[Segment] | None = None) -> Goodput:
    """The tally after one more observation. Observations older than the last are counted as at the last (the
    keeper's thread and the watch's may interleave). With `segments`, the intervals are appended to it too."""
    if tally.phase is None:
        tally = _start(tally, seen)
    if tally.phase == OVER:
        return _restart_if_new_run(tally, seen)
    now = max(seen.ts, tally.last if tally.last is not None else seen.ts)
    if isinstance(seen, Tick):
        return _tick(tally, seen, now, segments)
    return _mark(tally, seen, now, segments)


def replay(observations: Iterable[Observation], tally: Goodput | None = None,
           segments: list[Segment] | None = None) -> Goodput:
    for seen in sorted(observations, key=lambda o: o.ts):
        tally = observe(tally or Goodput(), seen, segments)
    return tally or Goodput()


def until(tally: Goodput, now: float, segments: list[Segment] | None = None) -> Goodput:
    """The tally as of `now` (the interval since the last observation in the current phase's bucket)."""
    return tally if tally.phase in (None, OVER) else observe(tally, Tick(now), segments)


def _start(tally: Goodput, seen: Observation) -> Goodput:
    ready = seen.tpu_state == READY if isinstance(seen, Tick) and seen.tpu_state else True
    phase = "recovery" if not ready else "advancing" if tally.step is not None else "first_step"
    return replace(tally, phase=phase, ready=ready, started=seen.ts, last=seen.ts)


def _restart_if_new_run(tally: Goodput, seen: Observation) -> Goodput:
    """After the end only a new watch counts again (the ended run's tally stays as it was)."""
    if isinstance(seen, Mark) and seen.kind == "watch":
        return _start(Goodput(), seen)
    return tally


def _accrue(tally: Goodput, now: float, bucket: str, segments: list[Segment] | None) -> Goodput:
    start = tally.last if tally.last is not None else now
    elapsed = max(0.0, now - start)
    if elapsed == 0:
        return replace(tally, last=now)
    paid = tally.ready  # and a run phase is only ever entered on a READY TPU (the tests hold it to that)
    seconds = {**tally.seconds, bucket: tally.seconds[bucket] + elapsed}
    if segments is not None:
        segments.append(Segment(start, now, bucket, paid))
    return replace(tally, seconds=seconds, last=now, paid_s=tally.paid_s + (elapsed if paid else 0.0),
                   attempt_advancing_s=tally.attempt_advancing_s + (elapsed if bucket == "advancing" else 0.0))


def _tick(tally: Goodput, seen: Tick, now: float, segments: list[Segment] | None) -> Goodput:
    gone = seen.tpu_state is not None and seen.tpu_state != READY
    if gone and tally.phase in RUN_PHASES:
        # The poll that first sees the TPU not ready: its whole interval is lost to recovery (the TPU went away
        # somewhere in it), not paid, and the recovery begins; the watch's own events follow.
        tally = replace(tally, ready=False)
        tally = _accrue(tally, now, "recovery", segments)
        tally = _disrupt(tally, now)
    else:
        tally = _accrue(tally, now, tally.phase or "first_step", segments)
        if seen.tpu_state is not None:
            tally = replace(tally, ready=not gone)
    return _steps(tally, seen.steps, now, segments) if seen.steps else tally


def _steps(tally: Goodput, steps: tuple[int, ...], now: float, segments: list[Segment] | None) -> Goodput:
    first, last = min(steps), max(steps)
    highest = last if tally.step is None else max(tally.step, last)
    if not tally.ready:  # written before the TPU went away, read only now: done before it, changing nothing
        before = tally.step_before if tally.phase != "recovery" or tally.step_before is None \
            else max(tally.step_before, highest)
        return replace(tally, step=highest, step_before=before)
    if tally.phase in ("recovery", "waiting", "provisioning", "setup", "first_step") and tally.relaunched:
        return _resumed(tally, first, last, now, segments)
    if tally.phase in ("first_step", "setup") or (tally.phase == "recovery" and
                                                   highest > (tally.step if tally.step is not None else -1)):
        # steps after a launch, or from a TPU that came back by itself (no relaunch): advancing from here
        return replace(tally, phase="advancing", step=highest, disrupted_at=None, step_before=None,
                       attempt_first_step=first if tally.attempt_first_step is None else tally.attempt_first_step)
    return replace(tally, step=highest)


def _resumed(tally: Goodput, first: int, last: int, now: float, segments: list[Segment] | None) -> Goodput:
    """The first steps after a relaunch close the recovery: the steps since the last checkpoint are lost, and
    the time they took (at the attempt's own pace) moves from advancing to lost."""
    lost_steps = max(0, tally.step_before - first + 1) if tally.step_before is not None else 0
    done = (tally.step_before - tally.attempt_first_step) if tally.step_before is not None and \
        tally.attempt_first_step is not None else 0
    pace = tally.attempt_advancing_s / done if done > 0 else 0.0
    lost_s = min(tally.attempt_advancing_s, lost_steps * pace)
    tally = _move(tally, "advancing", "lost", lost_s, segments)
    return replace(tally, phase="advancing", step=last, attempt_first_step=first, attempt_advancing_s=0.0,
                   step_before=None, disrupted_at=None, relaunched=False, recoveries=tally.recoveries + 1,
                   steps_lost=tally.steps_lost + lost_steps)


def _mark(tally: Goodput, seen: Mark, now: float, segments: list[Segment] | None) -> Goodput:
    tally = _accrue(tally, now, tally.phase or "first_step", segments)
    kind = seen.kind
    if kind in ENDS:
        return replace(tally, phase=OVER)
    if kind in DISRUPTIONS and "step_before" in seen.data:
        if kind == "hang":  # the time it made no progress before it was confirmed was hung, not advancing
            quiet = float(seen.data.get("lost_for", 0.0) or 0.0)
            tally = _move(tally, "advancing", "hang", min(quiet, tally.attempt_advancing_s), segments)
            tally = replace(tally, attempt_advancing_s=max(0.0, tally.attempt_advancing_s - quiet))
        if kind == "preemption":  # the TPU is gone (a hang or a failure is restarted on the TPU it has)
            tally = replace(tally, ready=False)
        return _disrupt(tally, now)
    phase = seen.data.get("phase")
    if kind == "recovery" and phase in ("waiting", "provisioning", "setup"):
        return replace(tally, phase=phase, ready=phase == "setup")
    if kind == "restart":
        return replace(tally, phase="first_step", ready=True, relaunched=True)
    return tally


def _disrupt(tally: Goodput, now: float) -> Goodput:
    if tally.phase == "recovery" and tally.disrupted_at is not None:
        return tally  # one recovery, however many notes say so
    return replace(tally, phase="recovery", disrupted_at=now, relaunched=False,
                   step_before=tally.step if tally.step_before is None else tally.step_before)


def _move(tally: Goodput, source: str, target: str, amount: float, segments: list[Segment] | None) -> Goodput:
    """Re-label the last `amount` seconds of `source` as `target` (never more than `source` holds)."""
    amount = min(max(0.0, amount), tally.seconds[source])
    if amount <= 0:
        return tally
    if segments is not None:
        _relabel_tail(segments, source, target, amount)
    seconds = {**tally.seconds, source: tally.seconds[source] - amount, target: tally.seconds[target] + amount}
    return replace(tally, seconds=seconds)


def _relabel_tail(segments: list[Segment], source: str, target: str, amount: float) -> None:
    index = len(segments) - 1
    while amount > 1e-9 and index >= 0:
        segment = segments[index]
        if segment.bucket == source:
            length = segment.end - segment.start
            if length <= amount:
                segments[index] = replace(segment, bucket=target)
            else:  # split: the older part stays, the newer part moves
                cut = segment.end - amount
                segments[index:index + 1] = [replace(segment, end=cut), replace(segment, start=cut, bucket=target)]
            amount -= min(length, amount)
        index -= 1


def clip(segments: Iterable[Segment], start: float, end: float) -> dict[str, float]:
    """Seconds per bucket (and `paid`) of the segments within [start, end]: the hours of a time range."""
    totals = {**dict.fromkeys(BUCKETS, 0.0), "paid": 0.0}
    for segment in segments:
        overlap = min(end, segment.end) - max(start, segment.start)
        if overlap > 0:
            totals[segment.bucket] += overlap
            totals["paid"] += overlap if segment.paid else 0.0
    return totals
