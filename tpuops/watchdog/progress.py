"""The step series of a run and the hang threshold.

Progress is the highest step seen: from the TensorBoard scalars (the same incremental `Tail` that `tpuops logs`
uses, so each poll reads only what the event files grew by) and, for a trainer that writes none, from step
numbers in worker 0's output (`watch.progress`, read from a byte offset over SSH). The gap between steps is
the writer's own time between two new steps (an event's wall_time), or for output lines the observer's time
spread evenly over the steps one poll found.

    T = hang_after, when the spec gives one; else clamp(factor x median gap, min_hang, max_hang)

The clock runs only after the first step (compiling is not hanging), from the last new step or the last time a
checkpoint was seen being written, whichever is later: files other than event files under the logdir that
changed since the previous poll (the listing the scalar reader makes anyway; no extra request).
"""

from __future__ import annotations

import re
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from tpuops.cloud.blobs import BlobStore
from tpuops.logs.tail import Labeler, Tail
from tpuops.remote.base import Runner
from tpuops.shipped import script_command
from tpuops.watchdog.settings import WatchdogSettings

MAX_GAPS = 256  # the median of the most recent gaps: the pace after a warm-up matters, not the warm-up
OUTPUT_CHUNK = 256 << 10  # at most this much of worker 0's new output per poll (the rest is skipped)


@dataclass
class StepSeries:
    """What the watchdog knows of a run's progress; times are the observer's (seconds since the epoch)."""

    last_step: int | None = None
    last_step_at: float | None = None  # when the watchdog saw the step advance
    started_at: float | None = None  # when watching this run began
    checkpoint_at: float | None = None  # when files other than event files last changed under the logdir
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_GAPS))
    _last_writer_time: float | None = None

    def add_points(self, points: Iterable[tuple[int, float | None]], now: float) -> bool:
        """New (step, writer time) pairs in arrival order (writer time None: spread over the poll).
        True when the highest step advanced."""
        fresh = [(step, when) for step, when in points if self.last_step is None or step > self.last_step]
        advanced = False
        spread_from = self.last_step_at
        untimed = [step for step, when in fresh if when is None]
        spread = (now - spread_from) / len(set(untimed)) if untimed and spread_from is not None else None
        for step, when in fresh:
            if self.last_step is not None and step <= self.last_step:
                continue  # another tag of a step already counted
            if self.last_step is not None:
                gap = (when - self._last_writer_time) if when is not None and self._last_writer_time is not None \
                    else spread
                if gap is not None and gap >= 0:
                    self.gaps.append(gap)
            self.last_step, advanced = step, True
            self._last_writer_time = when
        if advanced:
            self.last_step_at = now
        return advanced

    def saw_checkpoint(self, now: float) -> None:
        self.checkpoint_at = now

    def threshold(self, settings: WatchdogSettings) -> float:
        if settings.hang_after is not None:
            return settings.hang_after
        if len(self.gaps) < settings.min_gaps:
            return settings.max_hang
        pace = statistics.median(self.gaps)
        return min(settings.max_hang, max(settings.min_hang, settings.factor * pace))

    def quiet_for(self, now: float) -> float | None:
        """Seconds since the last sign of life (a new step, a checkpoint being written); None before step one."""
        if self.last_step_at is None:
            return None
        return now - max(self.last_step_at, self.checkpoint_at or 0.0)

    def suspect(self, settings: WatchdogSettings, now: float) -> bool:
        quiet = self.quiet_for(now)
        return quiet is not None and quiet > self.threshold(settings)


# --------------------------------------------------------------------------------------------- sources


class ScalarProgress:
    """Steps of the TensorBoard scalars under the logdir, and whether other files there changed (a checkpoint).
    `label` names each event file's run, None for a file of a run not watched: an earlier run's steps in the same
    logdir (higher than this run's) would otherwise stand for progress this run never makes."""

    def __init__(self, store: BlobStore, warn: Callable[[str], None], label: Labeler | None = None) -> None:
        self.tail = Tail(store, warn=warn, label=label)
        self._others: tuple[int, int, float] | None = None
        self.wrote_scalars = False

    def poll(self) -> tuple[list[tuple[int, float | None]], bool]:
        """(new steps with their writer times, a checkpoint is being written)."""
        points = self.tail.poll()
        self.wrote_scalars = self.wrote_scalars or bool(points)
        others = self.tail.others
        writing = self._others is not None and others != self._others and others[0] > 0
        self._others = others
        return [(p.step, p.wall_time) for p in points], writing


class OutputProgress:
    """Step numbers in worker 0's output of the run, read incrementally from a byte offset."""

    def __init__(self, pattern: str, cluster: str, run_id: str) -> None:
        self.pattern = re.compile(pattern)
        self.cluster, self.run_id = cluster, run_id
        self.offset = 0
        self._partial = b""
        self.bytes_read = 0

    def poll(self, runner: Runner) -> list[tuple[int, float | None]]:
        argv = script_command("watchdog_progress", self.cluster, self.run_id, str(self.offset), str(OUTPUT_CHUNK))
        result = runner.run(argv, capture=True, timeout=30)
        if not result.ok:
            return []
        header, _, data = result.stdout.partition(b"\n")
        words = header.split()
        if len(words) != 2 or words[0] != b"from":
            return []
        start = int(words[1])
        if start != self.offset:
            self._partial = b""  # skipped ahead (too much new output) or the file was replaced
        self.offset = start + len(data)
        self.bytes_read += len(result.stdout)
        return self.steps_in(data)

    def steps_in(self, data: bytes) -> list[tuple[int, float | None]]:
        text = self._partial + data
        complete, _, self._partial = text.rpartition(b"\n")
        steps = []
        for line in complete.decode("utf-8", "replace").splitlines():
            match = self.pattern.search(line)
            if match:
                try:
                    steps.append((int(match.group(1)), None))
                except (ValueError, IndexError):
                    continue
        return steps


def highest(points: Sequence[tuple[int, float | None]]) -> int | None:
    return max((step for step, _ in points), default=None)
