"""`tpuops status`: every resource of a cluster with its live state, the TPU's health, its workers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from tpuops.access.cluster import spec_of
from tpuops.access.guard_state import with_guard_state
from tpuops.access.workers import number_hosts
from tpuops.autostop.client import CostSoFar, held_cost
from tpuops.cloud.base import TpuMode
from tpuops.cloud.kinds import handler
from tpuops.cloud.kinds.base import ResourceStatus
from tpuops.cloud.kinds.client_vm import vm_row
from tpuops.cloud.kinds.compute_tpu import slice_node, slice_row
from tpuops.cloud.kinds.guard_vm import guard_row, is_guard
from tpuops.cloud.kinds.storage import bucket_row
from tpuops.cloud.kinds.tpu import node_row, queued_row
from tpuops.context import Context
from tpuops.errors import ClusterNotFound
from tpuops.guard.report import GuardReport, guard_report
from tpuops.ops.autostop import GuardStatus, guard_status
from tpuops.ops.discover import find_in_project
from tpuops.spec import CLUSTER_LABEL, Spec
from tpuops.state import MOVED_EVENT, ClusterState, WorkerRecord
from tpuops.state.autostop import setting_of
from tpuops.watchdog.records import WatchdogView, watchdog_view


@dataclass(frozen=True)
class ClusterStatus:
    name: str
    provider: str
    project: str | None
    zone: str | None
    resources: tuple[ResourceStatus, ...]
    workers: tuple[WorkerRecord, ...]
    tpu_state: str | None
    tpu_health: str | None
    restarts: tuple[RestartEvent, ...] = ()  # recoveries by `tpuops watch` or the guard, oldest first
    run: RunStatus | None = None  # the current run, each worker's state of it
    found_by_label: str | None = None  # no local state: where the search by label looked
    guard: GuardStatus | None = None  # uptime, cost so far, autostop
    watchdog: WatchdogView | None = None  # the hang watchdog's last step and verdict, as a watch last wrote it
    recovery_guard: GuardReport | None = None  # `tpuops guard`: alive, recoveries, goodput (None: never had one)
    pool: str | None = None  # with tpu.pools: the pool the TPU is in
    moves: tuple[RestartEvent, ...] = ()  # recoveries that moved the run to another pool, and why

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "workers": [w.model_dump() for w in self.workers],
                "guard": self.guard.as_dict() if self.guard else None,
                "recovery_guard": self.recovery_guard.as_dict() if self.recovery_guard else None}


@dataclass(frozen=True)
class RunStatus:
    id: str
    command: str
    started_at: str
    restart: int
    workers: dict[str, str]  # running | exited N | killed | lost | unreachable
    live: bool  # asked the workers just now (else: as last recorded)


@dataclass(frozen=True)
class RestartEvent:
    at: str
    message: str
    by: str | None = None  # "the guard", "`tpuops watch`" (None: recorded before tpuops said who)


@dataclass(frozen=True)
class ClusterSummary:
    name: str
    provider: str
    zone: str | None
    resources: tuple[str, ...]  # "kind name (recorded status)"
    workers: int
    updated_at: str
    autostop: str = "off"  # "idle 30m" | "off"
    cost: CostSoFar | None = None  # the TPU held since `up` saw it ready: hours x list $/hour (None: no TPU held)

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "cost": self.cost.as_dict() if self.cost else None}


def list_clusters(ctx: Context, now: float | None = None) -> list[ClusterSummary]:
    """All clusters with local state, from the state files and their specs alone (no cloud calls: it must stay
    fast); what each costs from the TPU's recorded creation time to `now` (default: the clock's)."""
    summaries = []
    for name in ctx.store.names():
        state = ctx.store.load(name)
        if state is None:
            continue
        spec = spec_of(state)
        resources = tuple(f"{r.kind} {r.name} ({r.status})" for r in state.resources)
        cost = held_cost(list_prices=ctx.provider_for(spec, state).list_prices, state=state, spec=spec,
                         now=time.time() if now is None else now)
        summaries.append(ClusterSummary(name, state.provider, state.zone, resources, len(state.workers),
                                        state.updated_at, setting_of(state, spec).describe(), cost))
    return summaries


def cluster_status(ctx: Context, name: str, zones: Sequence[str] = ()) -> ClusterStatus:
    """Live state of each recorded resource; without local state, of what carries the cluster's label."""
    state = ctx.store.load(name)
    if state is None:
        return status_by_label(ctx, name, zones)
    spec = spec_of(state)
    state = with_guard_state(ctx, state, spec)
    cloud = ctx.provider_for(spec, state).cloud()
    mode = tpu_mode(state, None)
    rows = []
    tpu_state = tpu_health = accelerator_type = None
    workers = tuple(state.workers)
    for record in state.resources:
        described = handler(record.kind).describe(cloud, record, mode)
        rows.append(described.row)
        node = described.node
        if node is not None:
            tpu_state, tpu_health, accelerator_type = node.state, node.health, node.accelerator_type
            if mode == "vm":  # the live addresses: a lost or replaced host shows here first
                port = state.workers[0].ssh_port if state.workers else 22
                slices = described.slice_nodes or (node,)
                workers = tuple(number_hosts([n.workers if n else () for n in slices], port))
    run = run_status(ctx, state, spec, tpu_state)
    return ClusterStatus(
        state.name, state.provider, state.project, state.zone, tuple(rows), workers, tpu_state, tpu_health,
        tuple(RestartEvent(e.at, e.message, e.by) for e in state.events if e.kind == "restart"),
        run,
        guard=guard_status(ctx, state, spec, tpu_state, accelerator_type),
        watchdog=watchdog_now(watchdog_view(ctx, state, spec), tpu_state, run),
        recovery_guard=guard_report(ctx, state, spec, last=3),
        pool=state.pool,
        moves=tuple(RestartEvent(e.at, e.message, e.by) for e in state.events if e.kind == MOVED_EVENT),
    )


def status_by_label(ctx: Context, name: str, zones: Sequence[str] = ()) -> ClusterStatus:
    """No local state: everything labelled with the cluster's name in the project (every zone, or `zones`).
    SearchFailed when the search cannot run to the end; ClusterNotFound only after one that found nothing."""
    found, provider = find_in_project(ctx, name, zones)
    if found.empty:
        raise ClusterNotFound(f"no cluster {name}: no local state, and nothing labelled {CLUSTER_LABEL}={name} "
                              f"in {found.where}", "create it with `tpuops up SPEC`")
    nodes = (*found.tpu_vms, *found.tpu_nodes)
    by_name = {(node.zone, node.name): node for node in nodes}
    rows = [queued_row(queued, {node: by_name.get((queued.zone, node)) for node in queued.node_names})
            for queued in found.queued]
    rows += [node_row(node) for node in nodes]
    made = [(found_slice, slice_node(found_slice)) for found_slice in found.compute_tpus]
    rows += [slice_row(found_slice, node) for found_slice, node in made]
    nodes = (*nodes, *(node for _, node in made))
    rows += [guard_row(vm) if is_guard(vm.labels) else vm_row(vm) for vm in found.vms]
    rows += [bucket_row(bucket) for bucket in found.buckets]
    tpu = nodes[0] if nodes else None
    # the hosts of the cluster's TPU: with Multislice, of every slice its queued resource made
    slices = [by_name[(q.zone, n)] for q in found.queued[:1] for n in q.node_names if (q.zone, n) in by_name]
    workers = tuple(number_hosts([n.workers for n in slices or nodes[:1]], port=22))
    return ClusterStatus(name, provider.name, found.project, tpu.zone if tpu else None, tuple(rows), workers,
                         tpu.state if tpu else None, tpu.health if tpu else None, found_by_label=found.where)


RUN_STATUS_CONNECT_TIMEOUT = 10.0  # status must answer quickly even when a worker is gone


def run_status(ctx: Context, state: ClusterState, spec: Spec | None, tpu_state: str | None) -> RunStatus | None:
    """The current run: asked live from the workers when the TPU is up; else what was last recorded can no
    longer be true of a TPU that is not READY, and says so."""
    from tpuops.access.cluster import access_for
    from tpuops.ops.run_control import states_of_run

    run = state.current_run
    if run is None:
        return None
    workers, live = dict(run.worker_states), False
    if tpu_state == "READY" and state.workers:  # the state status holds (with its guard's changes): not read again
        access = access_for(ctx, state, spec)
        workers, live = states_of_run(ctx, access, connect_timeout=RUN_STATUS_CONNECT_TIMEOUT), True
    elif tpu_state != "READY":
        tpu = f"the TPU is {tpu_state}" if tpu_state else "the TPU is gone"
        workers = {worker: state_ if state_ not in LIVE_STATES else f"unknown ({tpu}; last recorded {state_})"
                   for worker, state_ in workers.items()}
    return RunStatus(run.id, run.command, run.started_at, run.restart, workers, live)


LIVE_STATES = {"running"}


def watchdog_now(view: WatchdogView | None, tpu_state: str | None, run: RunStatus | None) -> WatchdogView | None:
    """The last watch's view, with no verdict on a run that no longer runs (its "ok" was about then)."""
    if view is None:
        return None
    if tpu_state != "READY":
        return replace(view, verdict=f"not watching: the TPU is {tpu_state or 'gone'}")
    if run is not None and run.live and not any(s in LIVE_STATES for s in run.workers.values()):
        return replace(view, verdict="not watching: the run is over")
    return view


def tpu_mode(state: ClusterState | None, spec: Spec | None) -> TpuMode:
    if spec is not None:
        return spec.tpu.mode
    record = state.tpu_record() if state else None
    return "node" if record is not None and record.mode == "node" else "vm"
