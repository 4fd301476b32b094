"""What the dashboard keeps of one cluster between refreshes, read incrementally as `logs -f` and `guard logs -f`
read: the scalars through the logs reader's `Tail` (only the bytes each event file grew by), the ledger's events
after the last one seen, the heartbeat, the incidents' listing (their files are read once each, as tails).

One feed per cluster, refreshed at most every `min_interval` seconds however many browsers poll it (a listing of
the logdir and of the ledger, a read of the heartbeat, and the grown bytes: about 2,000 requests an hour); a reader that
fails (a bucket unreachable, no logdir yet) is reported in the feed and tried again at the next refresh.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tpuops.access.cluster import logdir_of, resolve_logdir
from tpuops.access.guard_place import guard_store
from tpuops.cloud.blob_types import BlobNotFound, BlobStore
from tpuops.context import Context
from tpuops.errors import TpuopsError
from tpuops.guard.ledger import Heartbeat, Ledger, LedgerEvent
from tpuops.logs.tail import Pollable
from tpuops.ops.logs import LogsRequest, logs_provider, open_source, run_map
from tpuops.spec import Spec
from tpuops.state import ClusterState
from tpuops.watchdog.records import INCIDENTS, Incident, folder_name, incidents, records_store

MAX_POINTS = 600  # per chart series sent to the browser (the whole series stays here)
TAIL_BYTES = 6000  # of each incident's stacks and output shown
MAX_TICKS = 3000  # points of progress replayed for the hours' timeline
INCIDENTS_EVERY = 6  # the incidents are listed every this many refreshes (they are rare; the rest is cheap)
Clock = Callable[[], float]


@dataclass
class Series:
    """One (run, tag) of scalars: every point, and a thinned copy for the browser."""

    points: list[tuple[int, float, float]] = field(default_factory=list)  # (step, value, wall time)

    def shown(self) -> list[tuple[int, float | None, float]]:
        """At most MAX_POINTS, evenly thinned, the last one kept; a NaN or infinite value as None (JSON has none)."""
        points = self.points
        if len(points) > MAX_POINTS:
            every = len(points) / (MAX_POINTS - 1)
            points = [points[int(i * every)] for i in range(MAX_POINTS - 1)] + [points[-1]]
        return [(step, value if math.isfinite(value) else None, wall) for step, value, wall in points]


class ClusterFeed:
    def __init__(self, ctx: Context, name: str, clock: Clock = time.time, min_interval: float = 5.0) -> None:
        self.ctx, self.name, self.clock, self.min_interval = ctx, name, clock, min_interval
        self.series: dict[tuple[str, str], Series] = {}
        self.events: list[LedgerEvent] = []
        self.heartbeat: Heartbeat | None = None
        self.incidents: list[dict[str, Any]] = []
        self.errors: dict[str, str] = {}
        self._tail: Pollable | None = None
        self._ledger: Ledger | None = None
        self._seen_event = ""
        self._incident_files: dict[str, dict[str, dict[str, str]]] = {}  # folder -> worker -> file -> tail
        self._refreshed = 0.0
        self._refreshes = 0
        self._lock = threading.Lock()

    def refresh(self, state: ClusterState, spec: Spec | None) -> None:
        """`state` and `spec` (None: its file unreadable): as the request that asks holds them."""
        with self._lock:
            now = self.clock()
            if self._refreshed and now - self._refreshed < self.min_interval:
                return
            self._refreshed = now
            self._read("scalars", lambda: self._read_scalars(state, spec))
            self._read("ledger", lambda: self._read_ledger(state, spec))
            if self._refreshes % INCIDENTS_EVERY == 0:
                self._read("incidents", lambda: self._read_incidents(state, spec))
            self._refreshes += 1

    def _read(self, what: str, read: Callable[[], None]) -> None:
        try:
            read()
            self.errors.pop(what, None)
        except TpuopsError as err:
            self.errors[what] = err.message

    def _read_scalars(self, state: ClusterState, spec: Spec | None) -> None:
        if self._tail is None:
            # Without a spec, resolve_logdir says why there is no logdir (its file gone, or no logs.tensorboard).
            logdir = logdir_of(state, spec) if spec is not None else resolve_logdir(self.ctx, state.name, None)
            request = LogsRequest(logdir=logdir,
                                  provider=logs_provider(self.ctx, state.name, None),
                                  runs=run_map(self.ctx, state.name, None, "all"))
            self._tail = open_source(self.ctx, request, warn=lambda text: None)
        for point in self._tail.poll():
            self.series.setdefault((point.run, point.tag), Series()).points.append(
                (point.step, point.value, point.wall_time))

    def _read_ledger(self, state: ClusterState, spec: Spec | None) -> None:
        if self._ledger is None:
            store = guard_store(self.ctx, state, spec)
            if store is None:
                return
            self._ledger = Ledger(store)
        for blob, event in self._ledger.events(after=self._seen_event):
            self._seen_event = blob
            self.events.append(event)
        self.heartbeat = self._ledger.heartbeat()

    def _read_incidents(self, state: ClusterState, spec: Spec | None) -> None:
        store = records_store(self.ctx, state, spec)
        found = incidents(store)
        self.incidents = [{**incident.as_dict(), "files": self._files_of(store, incident)} for incident in found]

    def _files_of(self, store: BlobStore, incident: Incident) -> dict[str, dict[str, str]]:
        """Each worker's stacks and output tail of an incident (written once, complete before incident.json)."""
        folder = INCIDENTS + folder_name(incident.at) + "/"
        if folder not in self._incident_files:
            files: dict[str, dict[str, str]] = {}
            for info in store.list(folder):
                worker, _, file = info.name[len(folder):].partition("/")
                if file in ("stacks.txt", "output.txt"):
                    files.setdefault(worker, {})[file] = _tail_of(store, info.name, info.size)
            self._incident_files[folder] = files
        return self._incident_files[folder]

    # ---------------------------------------------------------------------------------------------- views
    def scalars(self) -> dict[str, dict[str, list[tuple[int, float | None, float]]]]:
        """run -> tag -> [(step, value, wall time)], thinned for the browser."""
        charts: dict[str, dict[str, list[tuple[int, float | None, float]]]] = {}
        for (run, tag), series in sorted(self.series.items()):
            charts.setdefault(run, {})[tag] = series.shown()
        return charts

    def steps(self) -> list[tuple[float, int]]:
        """(wall time, step) of the tag with the most points: the run's progress for the hours' timeline, at most
        one point per `span / MAX_TICKS` seconds (a step going back, where a resumed run starts, always kept)."""
        by_tag: dict[str, list[tuple[float, int]]] = {}
        for (_, tag), series in self.series.items():
            by_tag.setdefault(tag, []).extend((wall, step) for step, _, wall in series.points)
        if not by_tag:
            return []
        points = sorted(max(by_tag.values(), key=len))
        gap = (points[-1][0] - points[0][0]) / MAX_TICKS
        kept = [points[0]]
        for wall, step in points[1:]:
            if wall - kept[-1][0] >= gap or step < kept[-1][1]:
                kept.append((wall, step))
        return kept if kept[-1] == points[-1] else [*kept, points[-1]]

    def bytes_read(self) -> int:
        return int(getattr(self._tail, "total_bytes_read", 0))


def _tail_of(store: BlobStore, name: str, size: int) -> str:
    try:
        data = store.read_range(name, max(0, size - TAIL_BYTES), size)
    except (BlobNotFound, TpuopsError):
        return ""
    return data.decode("utf-8", errors="replace")
