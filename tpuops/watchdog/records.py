"""Where the watchdog keeps what it found: `gs://BUCKET/.tpuops/NAME/` (the local provider: its bucket
directory), or the cluster's state directory when the cluster has no bucket.

    incidents/<time>/incident.json       class, odd worker, last step, threshold, action, reason
    incidents/<time>/<worker>/stacks.txt  py-spy dump (or the fallback) of every trainer process
    incidents/<time>/<worker>/output.txt  the last lines of the worker's output
    incidents/<time>/<worker>/metrics.txt the two probes (processes, libtpu's runtime metrics)
    watchdog.json                         the last step, when it was seen, the verdict (for `tpuops status`)

Plain functions over a BlobStore; the records are small JSON documents.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

from tpuops.cloud.blobs import BlobNotFound, BlobStore, DirBlobStore
from tpuops.context import Context
from tpuops.errors import TpuopsError
from tpuops.spec import Spec
from tpuops.state import ClusterState, bucket_of, record_prefix

INCIDENTS = "incidents/"
INCIDENT_FILE = "incident.json"
VIEW_FILE = "watchdog.json"
MAX_RECORD = 1 << 20


@dataclass(frozen=True)
class Incident:
    at: str  # UTC, ISO 8601: also the folder's name (with ':' left out)
    run_id: str
    kind: str  # device-hang | host-stall | worker-gone | stall
    odd_worker: str | None
    last_step: int | None
    quiet_for: float
    threshold: float
    action: str  # restart | recreate | stop
    reason: str
    workers: dict[str, str] = field(default_factory=dict)  # each worker's state of the run when confirmed
    metrics: str = ""  # what the probes said about libtpu's metrics (or why there were none)
    url: str = ""  # the incident's folder

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WatchdogView:
    """What `tpuops status` shows of the watchdog."""

    run_id: str
    last_step: int | None
    last_step_at: float | None  # seconds since the epoch
    threshold: float | None
    verdict: str
    updated_at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def records_store(ctx: Context, state: ClusterState, spec: Spec | None) -> BlobStore:
    bucket = bucket_of(state, spec)
    if bucket:
        return ctx.provider_for(spec, state).blob_store(record_prefix(bucket, state.name))
    return DirBlobStore(ctx.store.cluster_dir(state.name) / "watchdog")


def folder_name(at: str) -> str:
    return at.replace(":", "").replace("+0000", "Z")


def write_text(store: BlobStore, name: str, text: str) -> None:
    handle, path = tempfile.mkstemp(prefix="tpuops-watchdog-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        store.upload_file(path, name)
    finally:
        os.unlink(path)


def read_json(store: BlobStore, name: str) -> dict[str, Any] | None:
    try:
        data = store.read_range(name, 0, MAX_RECORD)
    except BlobNotFound:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def write_incident(store: BlobStore, incident: Incident, files: dict[str, str]) -> None:
    """The worker files first, incident.json last: a listing that shows it shows a complete incident."""
    folder = INCIDENTS + folder_name(incident.at) + "/"
    for name, text in files.items():
        write_text(store, folder + name, text)
    write_text(store, folder + INCIDENT_FILE, json.dumps(incident.as_dict(), indent=2))


def incidents(store: BlobStore) -> list[Incident]:
    """Every incident recorded, oldest first."""
    found = []
    for info in store.list(INCIDENTS):
        if not info.name.endswith("/" + INCIDENT_FILE):
            continue
        data = read_json(store, info.name)
        if data is None:
            continue
        try:
            known = {key: value for key, value in data.items() if key in Incident.__dataclass_fields__}
            found.append(Incident(**known))
        except TypeError:
            continue  # a record of another version, missing what this one needs
    return sorted(found, key=lambda incident: incident.at)


def write_view(store: BlobStore, view: WatchdogView) -> None:
    write_text(store, VIEW_FILE, json.dumps(view.as_dict()))


def read_view(store: BlobStore) -> WatchdogView | None:
    try:
        data = read_json(store, VIEW_FILE)
    except TpuopsError:
        return None
    if data is None:
        return None
    try:
        return WatchdogView(**data)
    except TypeError:
        return None


def watchdog_view(ctx: Context, state: ClusterState, spec: Spec | None) -> WatchdogView | None:
    """What the last watch wrote of the current run (None: no watch has looked at it)."""
    run = state.current_run
    if run is None:
        return None
    try:
        view = read_view(records_store(ctx, state, spec))
    except TpuopsError:
        return None
    return view if view is not None and view.run_id == run.id else None
