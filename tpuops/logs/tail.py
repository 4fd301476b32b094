"""Incremental reading of a TensorBoard logdir over a BlobStore (GCS or a directory).

`Tail(store).poll()` lists the logdir once, reads only the bytes each event file grew by since the last
poll (range reads; the start of a record still being written is kept in memory, never fetched again),
and returns the new scalar points. New files and runs are picked up, deleted files dropped, a file that
shrank (replaced) is read again from its start. `follow()` polls with a backoff while nothing changes and
survives failing polls. A run is a directory holding event files, named relative to the logdir ("." for
the logdir itself), as TensorBoard names them.

Reused by `tpuops logs` and by `tpuops run` (which follows while training and prints `latest_values`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from tpuops.cloud.blobs import BlobInfo, BlobNotFound, BlobStore
from tpuops.errors import TpuopsError, UsageError
from tpuops.logs.events import ScalarDecoder, ScalarPoint
from tpuops.logs.tfrecord import RecordReader

log = logging.getLogger(__name__)

READ_CHUNK = 32 << 20  # bytes per range read
EVENT_FILE_MARK = "tfevents"  # TensorBoard's own test: the basename contains "tfevents"

Warn = Callable[[str], None]
Labeler = Callable[[BlobInfo], "str | None"]  # an event file's run as shown, or None to leave the file out


def is_event_file(name: str) -> bool:
    return EVENT_FILE_MARK in name.rsplit("/", 1)[-1]


def run_of(name: str) -> str:
    """`train/events.out.tfevents.1.host` -> `train`; a file directly in the logdir -> `.`."""
    return name.rsplit("/", 1)[0] if "/" in name else "."


def compile_filter(pattern: str | None, what: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as err:
        raise UsageError(f"bad {what} regular expression {pattern!r}: {err}", "use Python regex syntax") from err


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic GC while decoding a chunk: it allocates hundreds of thousands of small tuples that can hold
    no cycle, and the collections they trigger cost about a fifth of the read."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class _FileCursor:
    """What we know of one event file: how many bytes were fetched, and the unfinished record."""

    name: str
    run: str
    fetched: int = 0
    reader: RecordReader = field(default_factory=RecordReader)


@dataclass(frozen=True)
class PollStats:
    files: int  # event files tailed after this poll
    bytes_read: int  # bytes fetched by this poll
    points: int  # points returned by this poll (after filters)


class Tail:
    """Follows every event file under a store's root. One instance per logdir; not thread-safe."""

    def __init__(
        self,
        store: BlobStore,
        *,
        tag: str | None = None,
        run: str | None = None,
        since: int | None = None,
        warn: Warn | None = None,
        label: Labeler | None = None,
    ) -> None:
        """`run` filters runs (subdirectories) by regex; `label` instead names each file's run (logs/runs.py)."""
        self.store = store
        self._tag_re = compile_filter(tag, "--tag")
        self._run_re = compile_filter(run, "--run")
        self._label = label or self._by_directory
        self._labels: dict[str, str | None] = {}  # decided once per file: its run does not change as it grows
        self._since = since
        self._warn = warn or log.warning
        self._cursors: dict[str, _FileCursor] = {}
        self._decoders: dict[str, ScalarDecoder] = {}
        self._tag_ok: dict[str, bool] = {}
        self.last = PollStats(files=0, bytes_read=0, points=0)
        self.total_bytes_read = 0
        self.polls = 0
        # (count, bytes, newest update) of the files that are not event files: the hang watchdog takes a change
        # here for a checkpoint being written, from the listing this poll makes anyway.
        self.others: tuple[int, int, float] = (0, 0, 0.0)

    @property
    def runs(self) -> list[str]:
        return sorted({cursor.run for cursor in self._cursors.values()})

    @property
    def files(self) -> list[str]:
        return sorted(self._cursors)

    def poll(self) -> list[ScalarPoint]:
        """One listing, then the grown part of each event file. Raises when the listing fails."""
        everything = self.store.list("")
        self.others = others_signature(everything)
        events = [info for info in everything if is_event_file(info.name)]
        for gone in set(self._labels) - {info.name for info in events}:
            del self._labels[gone]
        listing = [info for info in events if self._run(info) is not None]
        listed = {info.name for info in listing}
        for gone in set(self._cursors) - listed:
            del self._cursors[gone]  # deleted (or moved away): nothing more will come from it
        points: list[ScalarPoint] = []
        bytes_read = 0
        # Sorted: a run's files in the order TensorBoard reads them (names start with the creation time).
        for info in sorted(listing, key=lambda i: (self._run(i) or "", i.name)):
            bytes_read += self._read_file(info, points)
        points = self._filtered(points)
        self.polls += 1
        self.total_bytes_read += bytes_read
        self.last = PollStats(files=len(self._cursors), bytes_read=bytes_read, points=len(points))
        return points

    def _run(self, info: BlobInfo) -> str | None:
        if info.name not in self._labels:
            self._labels[info.name] = self._label(info)
        return self._labels[info.name]

    def _by_directory(self, info: BlobInfo) -> str | None:
        run = run_of(info.name)
        return run if self._run_re is None or self._run_re.search(run) is not None else None

    def _read_file(self, info: BlobInfo, points: list[ScalarPoint]) -> int:
        cursor = self._cursors.get(info.name)
        if cursor is None:
            cursor = self._cursors[info.name] = _FileCursor(info.name, self._run(info) or ".")
        if info.size < cursor.fetched:
            self._warn(f"{self._where(info.name)} shrank from {cursor.fetched} to {info.size} bytes "
                       "(replaced?): reading it again from the start")
            cursor = self._cursors[info.name] = _FileCursor(info.name, cursor.run)
        fetched = 0
        while cursor.fetched < info.size:  # in bounded range reads: a 2 GB file must not need 2 GB of memory
            try:
                data = self.store.read_range(info.name, cursor.fetched, min(info.size, cursor.fetched + READ_CHUNK))
            except BlobNotFound:
                del self._cursors[info.name]  # deleted since the listing
                break
            except (TpuopsError, OSError) as err:
                # One unreadable file must not hide the others: keep its offset and try again next poll.
                self._warn(f"could not read {self._where(info.name)}: {err}; will retry")
                break
            if not data:
                break  # shorter than listed (replaced meanwhile): the next listing tells
            cursor.fetched += len(data)
            fetched += len(data)
            self._decode(cursor, data, points)
        return fetched

    def _decode(self, cursor: _FileCursor, data: bytes, points: list[ScalarPoint]) -> None:
        decoder = self._decoders.get(cursor.run)
        if decoder is None:
            decoder = self._decoders[cursor.run] = ScalarDecoder(cursor.run)
        where = self._where(cursor.name)
        with gc_paused():
            decoder.decode_into(cursor.reader.feed(data), points,
                                on_error=lambda err: self._warn(f"skipping undecodable event in {where}: {err}"))
        for corruption in cursor.reader.corruptions:
            self._warn(f"skipping corrupt record in {self._where(cursor.name)} at offset {corruption.offset} "
                       f"({corruption.reason})")
        cursor.reader.corruptions.clear()

    def _filtered(self, points: list[ScalarPoint]) -> list[ScalarPoint]:
        if self._tag_re is None and self._since is None:
            return points
        return [p for p in points if self._tag_wanted(p.tag) and (self._since is None or p.step >= self._since)]

    def _tag_wanted(self, tag: str) -> bool:
        wanted = self._tag_ok.get(tag)
        if wanted is None:
            wanted = self._tag_ok[tag] = self._tag_re is None or self._tag_re.search(tag) is not None
        return wanted

    def _where(self, name: str) -> str:
        return f"{self.store.url.rstrip('/')}/{name}"


def others_signature(listing: Iterable[BlobInfo]) -> tuple[int, int, float]:
    # tpuops' own records (.tpuops/: the watchdog's view, incidents) are not the trainer's sign of life
    others = [info for info in listing if not is_event_file(info.name) and ".tpuops" not in info.name.split("/")]
    return len(others), sum(info.size for info in others), max((info.updated or 0.0 for info in others), default=0.0)


class Pollable(Protocol):
    """What `follow` drives: a Tail, or a Tail over a local mirror (see mirror.py)."""

    last: PollStats

    def poll(self) -> list[ScalarPoint]: ...


@dataclass(frozen=True)
class Backoff:
    """Poll every `initial` seconds while data comes, stretching by `factor` up to `maximum` while idle."""

    initial: float = 2.0
    maximum: float = 30.0
    factor: float = 1.5

    def next(self, delay: float, active: bool) -> float:
        return self.initial if active else min(self.maximum, max(self.initial, delay * self.factor))


def follow(
    tail: Pollable,
    *,
    backoff: Backoff = Backoff(),
    until_idle: float | None = None,
    warn: Warn | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[list[ScalarPoint]]:
    """Poll forever (or until nothing was read for `until_idle` seconds), yielding each non-empty batch.

    The first poll's errors propagate (a wrong bucket should fail at once); later failing polls are
    reported through `warn` and retried after the backoff, so a flaky network does not end a follow.
    """
    warn = warn or log.warning
    delay = backoff.initial
    idle_since = clock()
    first = True
    while True:
        try:
            points = tail.poll()
            active = tail.last.bytes_read > 0
        except (TpuopsError, OSError) as err:
            if first:
                raise
            warn(f"poll failed: {err}; retrying")
            points, active = [], False
        first = False
        if points:
            yield points
        now = clock()
        if active:
            idle_since = now
        if until_idle is not None and now - idle_since >= until_idle:
            return
        delay = backoff.next(delay, active)
        if until_idle is not None:
            delay = min(delay, max(0.0, until_idle - (now - idle_since)) + 1e-3)
        sleep(delay)


def latest_values(points: Iterable[ScalarPoint]) -> dict[tuple[str, str], ScalarPoint]:
    """The last point per (run, tag), in arrival order (after a restart from a checkpoint the newest
    value is the one written last, even if its step is lower)."""
    latest: dict[tuple[str, str], ScalarPoint] = {}
    for point in points:
        latest[(point.run, point.tag)] = point
    return latest


def read_scalars(store: BlobStore, *, tag: str | None = None, run: str | None = None, since: int | None = None,
                 warn: Warn | None = None) -> list[ScalarPoint]:
    """Every scalar under the store's root, read once."""
    return Tail(store, tag=tag, run=run, since=since, warn=warn).poll()
