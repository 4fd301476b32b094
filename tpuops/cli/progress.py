"""Progress while resources come up and code goes out: a live view on a terminal, one line per step otherwise."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tpuops.cli.render import err_console
from tpuops.sizes import size_text


class ProgressView:
    """Each resource's latest state: a live table on a terminal, one line per change otherwise (stderr)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.rows: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()
        self.live: Any = None

    def update(self, kind: str, name: str, text: str, phase: str | None = None) -> None:
        """One line of progress (`phase`: what a recovery makes of it, nothing here)."""
        if not self.enabled:
            return
        with self.lock:
            self.rows[(kind, name)] = text
            if self.live is not None:
                self.live.update(self.table())
            else:
                err_console.print(f"  {kind} {name}: {text}", markup=False)

    def table(self) -> Any:  # rich Table (rich is imported lazily)
        from rich.table import Table

        table = Table(show_header=True, header_style="bold", box=None)
        for column in ("resource", "name", "state"):
            table.add_column(column)
        for (kind, name), text in self.rows.items():
            table.add_row(kind, name, text)
        return table

    def start(self) -> None:
        """Show the live table from now on (a terminal only; elsewhere every update is a line)."""
        if not (self.enabled and err_console.is_terminal) or self.live is not None:
            return
        from rich.live import Live

        self.live = Live(self.table(), console=err_console, refresh_per_second=8, transient=False)
        self.live.start()

    def stop(self) -> None:
        with self.lock:
            if self.live is not None:
                self.live.stop()
                self.live = None

    @contextmanager
    def shown(self) -> Iterator[ProgressView]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


class PushView:
    """Every worker's part of a push as it goes: on a terminal a live table (worker, where, state, bytes of their
    total, rate), refreshed a few times a second; elsewhere, once the push is over, one line per worker (stderr).
    gs:// uploads are rows too. `update` and `upload` may be called from any thread."""

    waiting = "push: looking at the tree and the workers"
    where = "to"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.rows: dict[tuple[str, str], Any] = {}  # (worker, dest) -> its latest PushProgress
        self.uploads: dict[str, tuple[int, int, float]] = {}  # url -> (done, total, when it began)
        self.lock = threading.RLock()  # start() holds it while the live view draws its first table
        self.live: Any = None
        self.finished = False

    def update(self, progress: Any) -> None:  # a PushProgress (tpuops.remote.sync, imported lazily)
        if not self.enabled:
            return
        with self.lock:
            self.rows[(progress.worker, progress.dest)] = progress
        self.start()

    def upload(self, url: str, done: int, total: int) -> None:
        if not self.enabled:
            return

        with self.lock:
            began = self.uploads.get(url, (0, 0, time.monotonic()))[2]
            self.uploads[url] = (done, total, began)
        self.start()

    def start(self) -> None:
        """Show the live table (a terminal only); once finished, never again."""
        with self.lock:
            if not (self.enabled and err_console.is_terminal) or self.live is not None or self.finished:
                return
            from rich.live import Live

            self.live = Live(get_renderable=self.table, console=err_console, refresh_per_second=4, transient=True)
            self.live.start()

    def finish(self) -> None:
        """The push is over: the live table goes; in a pipe, each worker's line is printed."""
        with self.lock:
            if self.finished:
                return
            self.finished = True
            live, self.live = self.live, None
        if live is not None:
            live.stop()
        elif self.enabled:
            for line in self.lines():
                err_console.print(line, markup=False)

    @contextmanager
    def shown(self) -> Iterator[PushView]:
        self.start()
        try:
            yield self
        finally:
            self.finish()

    def table(self) -> Any:  # rich Table

        from rich.table import Table

        table = Table(show_header=True, header_style="bold", box=None, title_justify="left",
                      title=None if self.rows or self.uploads else self.waiting)
        for column, justify in (("worker", "left"), (self.where, "left"), ("state", "left"), ("bytes", "right"),
                                ("rate", "right")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        with self.lock:
            rows = list(self.rows.values())
            uploads = list(self.uploads.items())
        for row in rows:
            sending = row.status in ("sending", "receiving") or (row.status in ("sent", "received") and row.total)
            table.add_row(row.worker, row.dest, row.status, _of(row.done, row.total) if sending else "",
                          _rate(row.done, row.seconds) if sending else "")
        for url, (done, total, began) in uploads:
            table.add_row("", url, "uploading" if done < total else "uploaded", _of(done, total),
                          _rate(done, time.monotonic() - began))
        return table

    def lines(self) -> list[str]:
        """One line per worker over all its trees: what was sent from here, at what rate, or how it got it."""
        by_worker: dict[str, list[Any]] = {}
        for row in self.rows.values():
            by_worker.setdefault(row.worker, []).append(row)
        lines = []
        for worker, rows in by_worker.items():
            statuses = {row.status for row in rows}
            sent = sum(row.done for row in rows if row.status == "sent")
            seconds = sum(row.seconds for row in rows if row.status in ("sent", "relayed"))
            if "failed" in statuses:
                text = "failed (see below)"
            elif sent:
                text = f"sent {size_text(sent)} in {seconds:.1f} s ({_rate(sent, seconds)})"
            elif "relayed" in statuses:
                text = f"fetched from another worker in {seconds:.1f} s"
            else:
                text = "unchanged"
            lines.append(f"  push {worker}: {text}")
        return lines


class PullView(PushView):
    """A pull's progress: the same live table (bytes received of their total, rate per worker); in a pipe, the
    summary the command prints afterwards says it all."""

    waiting = "pull: listing the files on the workers"
    where = "into"

    def lines(self) -> list[str]:
        return []


def _of(done: int, total: int) -> str:
    return f"{size_text(done)} / {size_text(total)}"


def _rate(done: int, seconds: float) -> str:
    return f"{size_text(int(done / seconds))}/s" if seconds > 0 else ""


class TrainingView:
    """Training progress on a terminal: one live line per run (step N of M, steps/s, ETA, last loss), from the
    trainer's output (one worker's: they all print the same steps) and from its scalars, instead of every raw line
    and point. The last lines of each worker are kept, so a failed run can still show what it said."""

    TAIL_LINES = 30

    def __init__(self, totals: dict[str, int | None] | None = None, key: str | None = None) -> None:

        from tpuops.logs.progress import RunProgress

        self.runs: dict[str, RunProgress] = {}
        self.totals = totals or {}  # run -> the step count its command asks for
        self.key = key  # everything under one name (`run` follows one run)
        self.tails: dict[str, collections.deque[str]] = {}
        self.speaker: str | None = None  # the worker whose output lines are read
        self.lock = threading.RLock()  # start() holds it while the live view draws its first line
        self.live: Any = None

    @staticmethod
    def wanted(verbose: bool) -> bool:
        """Only on a terminal, and not with --verbose: a pipe keeps the raw lines exactly."""
        import sys

        return not verbose and sys.stdout.isatty()

    def __call__(self, worker: str, stream: str, line: str) -> None:
        """A LineHandler: the output of the workers."""
        import time

        from tpuops.logs.progress import RunProgress, read_line

        with self.lock:
            self.tails.setdefault(worker, collections.deque(maxlen=self.TAIL_LINES)).append(line)
            if self.speaker is None and read_line(line).step is not None:
                self.speaker = worker
            if worker == self.speaker:
                self.runs.setdefault(self.key or worker, RunProgress()).see_line(line, time.monotonic())
        self.start()

    def points(self, points: list[Any]) -> None:
        """New scalar points (ScalarPoint)."""

        from tpuops.logs.progress import see_points

        with self.lock:
            see_points(self.runs, points, time.monotonic(), self.key)
            for name, progress in self.runs.items():
                progress.total = progress.total or self.totals.get(name)
        self.start()

    def text(self) -> Any:
        from rich.text import Text

        from tpuops.logs.progress import progress_line

        with self.lock:
            lines = [progress_line(name, progress) for name, progress in self.runs.items()]
        return Text("\n".join(lines) or "waiting for the first step")

    def start(self) -> None:
        from tpuops.cli.render import console

        with self.lock:
            if self.live is not None:
                return
            from rich.live import Live

            self.live = Live(get_renderable=self.text, console=console, refresh_per_second=4, transient=False)
            self.live.start()

    def stop(self) -> None:
        with self.lock:
            live, self.live = self.live, None
        if live is not None:
            live.stop()

    def tail_of(self, worker: str) -> list[str]:
        with self.lock:
            return list(self.tails.get(worker, ()))

    @contextmanager
    def shown(self) -> Iterator[TrainingView]:
        try:
            yield self
        finally:
            self.stop()
