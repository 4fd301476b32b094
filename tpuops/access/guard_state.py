"""The guard's state handed back to the laptop.

A guard VM works on its own copy of the cluster's state (staged by `guard up`, guard/bundle.py). When it recovers
a preemption it re-creates the TPU (new workers, new host keys, perhaps another zone) and relaunches the run (a
new run record): the laptop's copy is then stale, and `ssh`, `launch`, `logs` or a later `guard up` (which would
stage that stale copy back onto the guard) would act on a TPU that is gone. So:

- the guard publishes its state and its pinned host keys to `gs://BUCKET/.tpuops/NAME/guard/state/` whenever they
  change (`StatePublisher`, at every poll: a write only on a change);
- the laptop's commands read that copy while the cluster has a guard VM and merge it into their own
  (`with_guard_state`): the newer TPU wins (its records, workers, zone and host keys), runs and events are joined
  (a run both know keeps, per worker, the state that says it ended), and what only the laptop knows stays (its
  spec path, the guard VM, a run launched since). The merge is idempotent, so no marker of what was seen is kept.

The bucket is the run's own (the workers and the guard read it already); the state holds no secret (state.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import ValidationError

from tpuops import keys
from tpuops.access import ssh_config
from tpuops.access.guard_place import guard_store
from tpuops.cloud.blob_types import BlobNotFound, BlobStore
from tpuops.context import Context
from tpuops.errors import TpuopsError
from tpuops.spec import Spec
from tpuops.state import TPU_KINDS, ClusterState, EventRecord, RunRecord, TpuRecord, epoch_seconds

STATE_BLOB, HOSTS_BLOB = "state/state.json", "state/known_hosts"  # under the guard's prefix
RUN_LIVE = ("setup", "starting", "running")


class StatePublisher:
    """The guard's side: its state and host keys to the bucket when they changed since the last publish."""

    def __init__(self, ctx: Context, cluster: str, store: BlobStore) -> None:
        self.ctx, self.cluster, self.store = ctx, cluster, store
        self._published: str | None = None

    def publish(self) -> bool:
        """True when a changed copy was written; a failed write is tried again at the next call."""
        state = self.ctx.store.load(self.cluster)
        if state is None:
            return False
        hosts_path = self.ctx.store.cluster_dir(self.cluster) / keys.KNOWN_HOSTS
        hosts = hosts_path.read_bytes() if hosts_path.is_file() else b""
        body = json.dumps(state.model_dump(mode="json", exclude={"updated_at"}), sort_keys=True).encode()
        digest = hashlib.sha256(body + b"\0" + hosts).hexdigest()
        if digest == self._published:
            return False
        try:
            self.store.write_bytes(HOSTS_BLOB, hosts)  # first: a laptop that sees the new state finds its keys
            self.store.write_bytes(STATE_BLOB, json.dumps(state.model_dump(mode="json")).encode())
        except TpuopsError:
            return False
        self._published = digest
        return True


def with_guard_state(ctx: Context, state: ClusterState, spec: Spec | None = None) -> ClusterState:
    """The laptop's side: `state` with what its guard VM changed merged in (saved when it changed anything).
    Without a guard VM, or when its copy cannot be read, `state` as it is: the guard's copy only adds."""
    if state.resource("guard_vm") is None:
        return state
    store = guard_store(ctx, state, spec)
    if store is None:
        return state
    try:
        guard = ClusterState.model_validate_json(store.read_versioned(STATE_BLOB).data)
        hosts = store.read_versioned(HOSTS_BLOB).data.decode()
    except (BlobNotFound, TpuopsError, ValidationError, UnicodeDecodeError):
        return state
    if guard.name != state.name:
        return state
    merged = merge_states(state, guard)
    if merged == state:
        return state
    if newer_tpu(state, guard):
        pin_guard_hosts(ctx.store.cluster_dir(state.name), merged, hosts)
    ctx.store.remember(merged)
    if newer_tpu(state, guard):  # the re-created TPU's workers: `ssh tpuops-NAME-w0` reaches them, not the old ones
        ssh_config.refresh(ctx.store.home, merged)
    return merged


def merge_states(laptop: ClusterState, guard: ClusterState) -> ClusterState:
    """The laptop's state with the guard's: the newer TPU wins, runs and events are joined."""
    merged = laptop.model_copy(deep=True)
    if newer_tpu(laptop, guard):
        kept = [record for record in merged.resources if record.kind not in TPU_KINDS]
        merged.resources = kept + [record.model_copy(deep=True) for record in guard.resources
                                   if record.kind in TPU_KINDS]
        merged.workers = [worker.model_copy(deep=True) for worker in guard.workers]
        merged.zone = guard.zone
        if guard.pool != laptop.pool:  # moved to another pool: its region's bucket (and grant) came with it
            moved = ("bucket", "iam")
            merged.resources = [r for r in merged.resources if r.kind not in moved] + \
                [r.model_copy(deep=True) for r in guard.resources if r.kind in moved]
            merged.pool = guard.pool
    buckets = list(dict.fromkeys([*laptop.recorded_buckets(), *guard.recorded_buckets()]))
    if buckets != laptop.recorded_buckets():  # the guard moved the run: each region's bucket is remembered
        merged.buckets = buckets
    merged.runs = join_runs(merged.runs, guard.runs)
    merged.events = join_events(merged.events, guard.events)
    merged.updated_at = laptop.updated_at  # compared by value: only a real change is saved
    return merged


def newer_tpu(laptop: ClusterState, guard: ClusterState) -> bool:
    """The guard's TPU was created after the laptop's (a recovery), or the laptop has none left."""
    theirs = _created(guard.tpu_record())
    if theirs is None:
        return False
    ours = _created(laptop.tpu_record())
    return ours is None or theirs > ours


def _created(record: TpuRecord | None) -> float | None:
    if record is None or record.status != "created":
        return None
    return epoch_seconds(record.created_at)


def join_runs(ours: list[RunRecord], theirs: list[RunRecord]) -> list[RunRecord]:
    by_id = {run.id: run.model_copy(deep=True) for run in ours}
    for run in theirs:
        mine = by_id.get(run.id)
        by_id[run.id] = run.model_copy(deep=True) if mine is None else _same_run(mine, run)
    return sorted(by_id.values(), key=lambda run: (epoch_seconds(run.started_at) or 0.0, run.id))


def _same_run(mine: RunRecord, theirs: RunRecord) -> RunRecord:
    """Per worker, the state that says the run ended there (the one who saw it end knows); else the guard's,
    which polls it."""
    states = dict(mine.worker_states)
    for worker, state in theirs.worker_states.items():
        if states.get(worker) not in RUN_LIVE and worker in states:
            continue
        states[worker] = state
    return mine.model_copy(update={"worker_states": states})


def join_events(ours: list[EventRecord], theirs: list[EventRecord]) -> list[EventRecord]:
    seen = {(event.at, event.kind, event.message) for event in ours}
    extra = [event for event in theirs if (event.at, event.kind, event.message) not in seen]
    return sorted([*ours, *extra], key=lambda event: epoch_seconds(event.at) or 0.0)


def pin_guard_hosts(cluster_dir: Path, state: ClusterState, known_hosts: str) -> None:
    """The host keys the guard pinned for the re-created workers (only for their addresses: other lines, such as
    the guard VM's own key, stay as they are here)."""
    wanted = {keys.known_hosts_name(w.ssh_host, w.ssh_port): (w.ssh_host, w.ssh_port) for w in state.workers}
    pinned = []
    for line in known_hosts.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in wanted:
            host, port = wanted[parts[0]]
            pinned.append(keys.PinnedKey(host, port, parts[1], parts[2]))
    if pinned:
        keys.pin_host_keys(cluster_dir, pinned)
