"""Training progress at a glance: step N of M, steps/s, ETA and the last loss of each run, from the trainer's own
output lines (`step 300/1000 ... loss 1.84`, as most trainers print) and from its scalars (a step and a `loss` tag).

M comes from the output (`step N/M`, `step N of M`) or from the run's command line (`--steps 1000`,
`--max_steps=1000`, ...); without it there is no ETA. The rate is measured over the last RATE_WINDOW seconds of
steps seen here (not the trainer's clock), so a pause shows at once. Plain values only: the CLI draws the lines.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from tpuops.durations import format_duration
from tpuops.logs.events import ScalarPoint

RATE_WINDOW = 30.0  # seconds of steps the rate is measured over
STEP_OF = re.compile(r"\bstep\s*[:=]?\s*(\d+)\s*(?:/|of)\s*(\d+)", re.I)
STEP_ALONE = re.compile(r"\bstep\s*[:=]?\s*(\d+)\b", re.I)
LOSS = re.compile(r"(?<![\w.])(?:train[_ ]?)?loss\s*[:=]?\s*(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)", re.I)
TOTAL_IN_COMMAND = re.compile(
    r"--(?:max|num|train|total)?[_-]?(?:train[_-]?)?steps?[= ]+(\d+)\b", re.I)
LOSS_TAGS = ("loss", "train/loss", "train_loss", "training_loss", "loss/train")


@dataclass(frozen=True)
class LineReading:
    step: int | None = None
    total: int | None = None
    loss: float | None = None


def read_line(line: str) -> LineReading:
    """What a trainer's output line says about progress (nothing, for most lines)."""
    total = None
    match = STEP_OF.search(line)
    if match:
        step, total = int(match.group(1)), int(match.group(2))
    else:
        alone = STEP_ALONE.search(line)
        step = int(alone.group(1)) if alone else None
    loss = LOSS.search(line)
    return LineReading(step, total if total else None, float(loss.group(1)) if loss else None)


def total_from_command(command: str | None) -> int | None:
    """The step count a run's command line asks for (`--steps 1000`, `--max_steps=1000`), if it says."""
    match = TOTAL_IN_COMMAND.search(command or "")
    return int(match.group(1)) if match and int(match.group(1)) > 0 else None


@dataclass
class RunProgress:
    """One run's progress as seen so far."""

    total: int | None = None
    step: int | None = None
    loss: float | None = None
    seen: deque[tuple[float, int]] = field(default_factory=deque)  # (when, step) over the last RATE_WINDOW s

    def see_step(self, step: int, now: float) -> None:
        if self.step is not None and step < self.step:
            return  # a slower source (scalars flushed late), or a resume short of where it was: not news
        self.step = step
        if not self.seen or self.seen[-1][1] != step:
            self.seen.append((now, step))
        while len(self.seen) > 2 and now - self.seen[1][0] >= RATE_WINDOW:
            self.seen.popleft()

    def see_line(self, line: str, now: float) -> None:
        reading = read_line(line)
        if reading.step is not None and self.step is not None and reading.step < self.step:
            return  # an older step's line: its loss is not the last one either
        if reading.total:
            self.total = reading.total
        if reading.step is not None:
            self.see_step(reading.step, now)
        if reading.loss is not None:
            self.loss = reading.loss

    def rate(self) -> float | None:
        """Steps per second over the window; None until two different steps were seen apart in time."""
        if len(self.seen) < 2:
            return None
        (first_at, first), (last_at, last) = self.seen[0], self.seen[-1]
        if last_at <= first_at or last <= first:
            return None
        return (last - first) / (last_at - first_at)


def see_points(runs: dict[str, RunProgress], points: Iterable[ScalarPoint], now: float,
               key: str | None = None) -> None:
    """Scalars into each run's progress (all into `key` when given: `run` follows one run)."""
    for point in sorted(points, key=lambda p: p.step):
        progress = runs.setdefault(key or point.run, RunProgress())
        if progress.step is None or point.step >= progress.step:
            progress.see_step(point.step, now)
            if point.tag.lower() in LOSS_TAGS:
                progress.loss = point.value


def progress_line(name: str, progress: RunProgress) -> str:
    """`NAME step 300/1000 (30%)  12.5 steps/s  ETA 56s  loss 1.84`; parts it cannot know yet are left out."""
    if progress.step is None:
        return f"{name} waiting for the first step"
    parts = [f"{name} step {progress.step}"]
    if progress.total:
        parts[0] += f"/{progress.total} ({min(100, 100 * progress.step // progress.total)}%)"
    rate = progress.rate()
    if rate:
        parts.append(f"{rate:.3g} steps/s")
        if progress.total and progress.step < progress.total:
            parts.append(f"ETA {format_duration((progress.total - progress.step) / rate)}")
    if progress.loss is not None:
        parts.append(f"loss {progress.loss:.4g}")
    return "  ".join(parts)
