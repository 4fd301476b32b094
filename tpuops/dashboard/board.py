"""The dashboard's JSON documents: every cluster at a glance, one cluster in full, where the hours went.

`Board` holds one `ClusterFeed` per cluster (incremental reads) and the live status of each (the TPU API, the
workers, the autostop agent: what `tpuops status` asks), cached for `live_ttl` seconds and refreshed in the
background so a page never waits on a slow API. It reads; it never writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tpuops import catalog
from tpuops.access.cluster import spec_of
from tpuops.context import Context
from tpuops.dashboard import hours
from tpuops.dashboard.feeds import ClusterFeed
from tpuops.errors import TpuopsError
from tpuops.ops.status import ClusterStatus, cluster_status
from tpuops.spec import Spec
from tpuops.state import ClusterState

LIVE_TTL_S = 15.0
MARKED = {"preemption": "preemption", "hang": "hang", "failure": "failure", "recovered": "recovery",
          "restart": "restart"}  # ledger events drawn on the step axis


@dataclass(frozen=True)
class Held:
    """What one request reads of a cluster, once: its state, and its spec (None: the file is gone or invalid)."""

    state: ClusterState
    spec: Spec | None


class Board:
    def __init__(self, ctx: Context, clock: Callable[[], float] = time.time, live_ttl: float = LIVE_TTL_S,
                 feed_interval: float = 5.0) -> None:
        self.ctx, self.clock, self.live_ttl, self.feed_interval = ctx, clock, live_ttl, feed_interval
        self._feeds: dict[str, ClusterFeed] = {}
        self._live: dict[str, tuple[float, ClusterStatus | None, str | None]] = {}
        self._refreshing: set[str] = set()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------- sources
    def names(self) -> list[str]:
        return sorted(self.ctx.store.names())

    def held(self, name: str) -> Held | None:
        """The cluster's state and spec, read once for the request that asks (and handed on within it)."""
        state = self.ctx.store.load(name) if name in self.ctx.store.names() else None
        return Held(state, spec_of(state)) if state is not None else None

    def feed(self, held: Held) -> ClusterFeed:
        name = held.state.name
        with self._lock:
            feed = self._feeds.get(name)
            if feed is None:
                feed = self._feeds[name] = ClusterFeed(self.ctx, name, self.clock, self.feed_interval)
        feed.refresh(held.state, held.spec)
        return feed

    def live(self, name: str, wait: bool = False) -> tuple[ClusterStatus | None, str | None, float | None]:
        """(status, error, its age in seconds): the cached one; a stale one is refreshed in the background (or
        now, with `wait`)."""
        with self._lock:
            cached = self._live.get(name)
            stale = cached is None or self.clock() - cached[0] > self.live_ttl
            start = stale and name not in self._refreshing
            if start:
                self._refreshing.add(name)
        if start and wait:
            self._refresh_live(name)
        elif start:
            threading.Thread(target=self._refresh_live, args=(name,), daemon=True).start()
        with self._lock:
            cached = self._live.get(name)
        if cached is None:
            return None, None, None
        return cached[1], cached[2], round(self.clock() - cached[0], 1)

    def _refresh_live(self, name: str) -> None:
        try:
            status, error = cluster_status(self.ctx, name), None
        except TpuopsError as err:
            status, error = None, err.message
        except Exception as err:  # noqa: BLE001  a page must go on showing the rest; the error is shown
            status, error = None, f"{type(err).__name__}: {err}"
        with self._lock:
            self._live[name] = (self.clock(), status, error)
            self._refreshing.discard(name)

    # ------------------------------------------------------------------------------------------ documents
    def clusters(self, wait: bool = False) -> dict[str, Any]:
        rows = []
        for name in self.names():
            held = self.held(name)
            if held is not None:
                rows.append(self._overview(held, self.feed(held), wait))
        return {"now": self.clock(), "clusters": rows}

    def _overview(self, held: Held, feed: ClusterFeed, wait: bool) -> dict[str, Any]:
        state = held.state
        status, error, age = self.live(state.name, wait)
        cost = status.guard.cost if status is not None and status.guard is not None else None
        autostop = status.guard.autostop if status is not None and status.guard is not None else None
        guard = status.recovery_guard if status is not None else None
        beat = feed.heartbeat
        last = feed.events[-1] if feed.events else None
        recorded = state.events[-1] if state.events else None
        return {
            "name": state.name, "provider": state.provider, "zone": state.zone, "pool": state.pool,
            "tpu_type": held.spec.tpu.type if held.spec is not None else None,
            "tpu_state": status.tpu_state if status is not None else None,
            "status_age_s": age, "status_error": error,
            "cost": cost.as_dict() if cost is not None else None,
            "autostop": autostop.as_dict() if autostop is not None else None,
            "guard": guard.state_line() if guard is not None else None,
            "guard_alive": guard.alive if guard is not None else False,
            "heartbeat_age_s": round(beat.age(self.clock()), 1) if beat is not None else None,
            "goodput": beat.goodput.as_dict() if beat is not None else None,
            "last_event": ({"ts": last.ts, "kind": last.kind, "message": last.message} if last is not None else
                           {"at": recorded.at, "kind": recorded.kind, "message": recorded.message}
                           if recorded is not None else None),
            "errors": dict(feed.errors),
        }

    def cluster(self, name: str, wait: bool = False) -> dict[str, Any] | None:
        held = self.held(name)
        if held is None:
            return None
        state = held.state
        feed = self.feed(held)
        status, error, age = self.live(name, wait)
        return {
            "now": self.clock(), "overview": self._overview(held, feed, wait),
            "runs": [{"id": run.id, "command": run.command, "started_at": run.started_at, "restart": run.restart,
                      "workers": run.worker_states} for run in state.runs],
            "scalars": feed.scalars(),
            "markers": markers(feed.events, feed.incidents),
            "ledger": [{"ts": e.ts, "at": e.at, "kind": e.kind, "message": e.message, "holder": e.holder,
                        "data": e.data} for e in feed.events],
            "incidents": feed.incidents,
            "workers": ([w.model_dump() for w in status.workers] if status is not None
                        else [w.model_dump() for w in state.workers]),
            "run": asdict(status.run) if status is not None and status.run is not None else None,
            "resources": [asdict(r) for r in status.resources] if status is not None else [],
            "status_age_s": age, "status_error": error, "errors": dict(feed.errors),
            "bytes_read": feed.bytes_read(),
        }

    def hours(self, start: float, end: float) -> dict[str, Any]:
        per_cluster = {}
        for name in self.names():
            held = self.held(name)
            if held is None:
                continue
            feed = self.feed(held)
            if not feed.events:
                continue  # no ledger: no guard nor watch counted this cluster's time
            line = hours.timeline(feed.events, feed.steps(), min(end, self.clock()))
            per_cluster[name] = hours.hours_of(line.segments, start, end, self.price_of(held.state, held.spec))
        return {"from": start, "to": end, "clusters": per_cluster, "total": hours.total(per_cluster.values()),
                "buckets": list(hours.BUCKETS)}

    def price_of(self, state: ClusterState, spec: Spec | None) -> hours.Price:
        """As `status` prices it: the simulator's TPUs are free (its provider has no list prices)."""
        price = price_of(state, spec)
        if self.ctx.provider_for(spec, state).list_prices:
            return price
        return hours.Price(price.chips, 0.0, free="simulator")


def markers(events: list[Any], incidents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Preemptions, recoveries and hangs on the step axis, from the ledger and the incidents."""
    found = []
    for event in events:
        kind = MARKED.get(event.kind)
        step = event.data.get("first_step_after") if kind == "recovery" else event.data.get("step_before")
        if kind is not None and step is not None:
            found.append({"kind": kind, "step": step, "ts": event.ts, "message": event.message})
    for incident in incidents:
        if incident.get("last_step") is not None:
            found.append({"kind": "hang", "step": incident["last_step"], "at": incident["at"],
                          "message": f"{incident['kind']} ({incident['action']}): {incident['reason']}"})
    return found


def price_of(state: ClusterState, spec: Spec | None) -> hours.Price:
    """Chips and the list price per hour of the cluster's TPU (on demand or spot, as the spec asks)."""
    if spec is None:
        return hours.Price(0, 0.0)
    accelerator = catalog.load().accelerator(spec.tpu.type, listed_only=False)
    if accelerator is None:
        return hours.Price(0, 0.0)
    tpu = state.tpu_record()
    slices = len(tpu.node_names) if tpu is not None else 1
    per_hour = accelerator.known_price_per_hour(spot=bool(spec.tpu.spot or spec.tpu.preemptible))
    if per_hour is None:  # said where the price would be, as `status` says it: not $0.00
        return hours.Price(accelerator.chips * slices, 0.0, free="no list price")
    return hours.Price(accelerator.chips * slices, per_hour * slices)
