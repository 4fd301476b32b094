"""`tpuops status`: every resource of a cluster with its live state, the TPU's health, its workers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from tpuops.cloud.base import Cloud, TpuMode, TpuNode
from tpuops.context import Context
from tpuops.errors import TpuopsError
from tpuops.plan import IAM_ROLE
from tpuops.spec import CLUSTER_LABEL, Spec, load_spec
from tpuops.state import ClusterState, ResourceRecord, WorkerRecord


@dataclass(frozen=True)
class ResourceStatus:
    kind: str
    name: str
    zone: str | None
    state: str  # live state, "MISSING" when the cloud no longer has it
    detail: str = ""


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
    restarts: tuple[RestartEvent, ...] = ()  # recoveries by `tpuops watch`, oldest first
    run: RunStatus | None = None  # the current run, each worker's state of it

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "workers": [w.model_dump() for w in self.workers]}


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


@dataclass(frozen=True)
class ClusterSummary:
    name: str
    provider: str
    zone: str | None
    resources: tuple[str, ...]  # "kind name (recorded status)"
    workers: int
    updated_at: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def list_clusters(ctx: Context) -> list[ClusterSummary]:
    """All clusters with local state, from the state files alone (no cloud calls: it must stay fast)."""
    summaries = []
    for name in ctx.store.names():
        state = ctx.store.load(name)
        if state is None:
            continue
        resources = tuple(f"{r.kind} {r.name} ({r.status})" for r in state.resources)
        summaries.append(
            ClusterSummary(name, state.provider, state.zone, resources, len(state.workers), state.updated_at)
        )
    return summaries


def cluster_status(ctx: Context, name: str) -> ClusterStatus:
    state = ctx.store.require(name)
    cloud = cloud_for_state(ctx, state, spec_of(state))
    mode = tpu_mode(state, None)
    rows = []
    tpu_state = tpu_health = None
    workers = tuple(state.workers)
    for record in state.resources:
        row, node = live_status(cloud, record, mode)
        rows.append(row)
        if node is not None:
            tpu_state, tpu_health = node.state, node.health
            if mode == "vm":  # the live addresses: a lost or replaced host shows here first
                port = state.workers[0].ssh_port if state.workers else 22
                workers = tuple(
                    WorkerRecord(
                        index=w.index,
                        internal_ip=w.internal_ip,
                        external_ip=w.external_ip,
                        ssh_host=w.external_ip or w.internal_ip,
                        ssh_port=port,
                    )
                    for w in node.workers
                )
    return ClusterStatus(
        state.name, state.provider, state.project, state.zone, tuple(rows), workers, tpu_state, tpu_health,
        tuple(RestartEvent(e.at, e.message) for e in state.events if e.kind == "restart"),
        run_status(ctx, state, reachable=tpu_state == "READY"),
    )


RUN_STATUS_CONNECT_TIMEOUT = 10.0  # status must answer quickly even when a worker is gone


def run_status(ctx: Context, state: ClusterState, reachable: bool) -> RunStatus | None:
    """The current run: asked live from the workers when the TPU is up, else as last recorded."""
    from tpuops.ops.launch import run_states

    run = state.current_run
    if run is None:
        return None
    workers, live = dict(run.worker_states), False
    if reachable and state.workers:
        workers, live = run_states(ctx, state.name, connect_timeout=RUN_STATUS_CONNECT_TIMEOUT), True
    return RunStatus(run.id, run.command, run.started_at, run.restart, workers, live)


def live_status(cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> tuple[ResourceStatus, TpuNode | None]:
    zone = record.zone or ""
    if record.kind == "bucket":
        bucket = cloud.storage.get_bucket(record.name)
        if bucket is None:
            return ResourceStatus("bucket", record.name, None, "MISSING"), None
        return ResourceStatus("bucket", record.name, None, "EXISTS", f"location {bucket.location}"), None
    if record.kind == "iam":
        member = record.detail.get("member", "")
        granted = cloud.storage.get_bucket(record.name) is not None and member in cloud.storage.bucket_members(
            record.name, IAM_ROLE
        )
        state = "GRANTED" if granted else "MISSING"
        return ResourceStatus("iam", record.name, None, state, f"{IAM_ROLE} {member}"), None
    if record.kind == "client_vm":
        vm = cloud.vms.get_vm(zone, record.name)
        if vm is None:
            return ResourceStatus("client_vm", record.name, zone, "MISSING"), None
        ips = f"internal {vm.internal_ip or '-'}, external {vm.external_ip or '-'}"
        return ResourceStatus("client_vm", record.name, zone, vm.state, ips), None
    node_name = record.detail.get("node", record.name)
    node = cloud.tpu_api(mode).get_node(zone, node_name) if zone else None
    if record.kind == "queued_resource":
        queued = cloud.queued.get_queued(zone, record.name) if zone else None
        state = queued.state if queued else "MISSING"
        detail = f"node {node_name}: {node.state if node else 'not created'}"
        return ResourceStatus("queued_resource", record.name, zone, state, detail), node
    if node is None:
        return ResourceStatus("tpu", record.name, zone, "MISSING"), None
    detail = f"{node.accelerator_type}, health {node.health or '-'}, {len(node.workers)} worker(s)"
    return ResourceStatus("tpu", record.name, zone, node.state, detail), node


def spec_of(state: ClusterState) -> Spec | None:
    """The spec the cluster was made from, if its file is still there and valid (else state alone is used)."""
    try:
        return load_spec(Path(state.spec_path)) if state.spec_path else None
    except TpuopsError:
        return None


def tpu_mode(state: ClusterState | None, spec: Spec | None) -> TpuMode:
    if spec is not None:
        return spec.tpu.mode
    for record in state.resources if state else []:
        if record.kind in ("tpu", "queued_resource") and record.detail.get("mode") == "node":
            return "node"
    return "vm"


def cloud_for_state(ctx: Context, state: ClusterState | None, spec: Spec | None) -> Cloud:
    if spec is not None:
        return ctx.cloud_for(spec, (state.project if state else None) or ctx.project_for(spec))
    assert state is not None
    if state.provider == "local":
        from tpuops.cloud.local import make_cloud as make_local_cloud

        return make_local_cloud(ctx.local_root)
    from tpuops.cloud.gcp import make_cloud as make_gcp_cloud

    return make_gcp_cloud(ctx.env, state.project or ctx.require_project(None))


def labelled(labels: object, cluster: str) -> bool:
    return isinstance(labels, dict) and labels.get(CLUSTER_LABEL) == cluster
