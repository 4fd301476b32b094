"""`tpuops down`: delete what tpuops created, found through the state file and, when that is missing or
stale, through the cluster label in the spec's zones. Anything with our name but not our label is left alone.

Two steps so the CLI can confirm in between: `find` (no changes) and `execute`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tpuops import keys
from tpuops.cloud.base import Cloud, TpuMode
from tpuops.context import Context
from tpuops.errors import CloudError
from tpuops.ops.run_records import end_runs_with_the_tpu
from tpuops.ops.status import cloud_for_state, labelled, spec_of, tpu_mode
from tpuops.plan import client_vm_name, queued_resource_name, tpu_name
from tpuops.spec import CLUSTER_LABEL, Spec, load_spec
from tpuops.state import ClusterState

Progress = Callable[[str, str, str], None]


@dataclass(frozen=True)
class Doomed:
    kind: str  # "queued_resource" | "tpu" | "client_vm" | "bucket"
    name: str
    zone: str | None = None


@dataclass(frozen=True)
class DownPlan:
    cluster: str
    doomed: tuple[Doomed, ...]
    left_alone: tuple[str, ...]  # resources with our name but not our label
    kept_bucket: str | None  # kept unless --delete-bucket
    searched: bool  # False when there was neither state nor spec to search with
    mode: TpuMode = "vm"


@dataclass(frozen=True)
class DownResult:
    cluster: str
    deleted: tuple[Doomed, ...]
    left_alone: tuple[str, ...]
    kept_bucket: str | None

    @property
    def nothing_left(self) -> bool:
        return not self.deleted


def find(ctx: Context, target: str, delete_bucket: bool = False, force: bool = False) -> tuple[DownPlan, Cloud | None]:
    """What `down` would delete. `target` is a cluster name or a spec file (needed when state is lost)."""
    spec: Spec | None = None
    if target.endswith((".yaml", ".yml")) or Path(target).is_file():
        spec = load_spec(target)
        name = spec.name
    else:
        name = target
    state = ctx.store.load(name)
    spec = spec or (spec_of(state) if state else None)
    if state is None and spec is None:
        return DownPlan(name, (), (), None, searched=False), None
    cloud = cloud_for_state(ctx, state, spec)
    mode = tpu_mode(state, spec)
    finder = Finder(cloud, name, mode)
    for zone in zones_to_search(state, spec):
        finder.search_zone(zone)
    for record in state.resources if state else []:
        finder.check_recorded(record.kind, record.name, record.zone)
    if spec is not None and spec.zone:  # names `up` would use, in case state is lost
        for kind, expected in expected_names(spec):
            finder.check_recorded(kind, expected, spec.zone)
    bucket_name = bucket_of(state, spec)
    kept = None
    if bucket_name:
        if delete_bucket:
            finder.add_bucket(bucket_name, force)
        elif cloud.storage.get_bucket(bucket_name) is not None:
            kept = bucket_name
    plan = DownPlan(name, tuple(finder.doomed), tuple(finder.left_alone), kept, searched=True, mode=mode)
    return plan, cloud


def execute(ctx: Context, plan: DownPlan, cloud: Cloud | None, progress: Progress | None = None) -> DownResult:
    report = progress or (lambda kind, name, text: None)
    if cloud is not None and plan.doomed:
        compute = [d for d in plan.doomed if d.kind != "bucket"]
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="down") as pool:
            futures = [pool.submit(delete_one, cloud, plan.mode, doomed, report) for doomed in compute]
        for future in futures:
            future.result()
        for doomed in (d for d in plan.doomed if d.kind == "bucket"):
            delete_one(cloud, plan.mode, doomed, report)
    forget_cluster(ctx, plan)
    return DownResult(plan.cluster, plan.doomed, plan.left_alone, plan.kept_bucket)


def delete_one(cloud: Cloud, mode: TpuMode, doomed: Doomed, report: Progress) -> None:
    report(doomed.kind, doomed.name, "deleting")
    zone = doomed.zone or ""
    if doomed.kind == "queued_resource":
        cloud.queued.delete_queued(zone, doomed.name)  # with force: its node goes too
    elif doomed.kind == "tpu":
        cloud.tpu_api(mode).delete_node(zone, doomed.name)
    elif doomed.kind == "client_vm":
        cloud.vms.delete_vm(zone, doomed.name)
    elif doomed.kind == "bucket":
        cloud.storage.delete_bucket(doomed.name, force=True)  # emptiness was checked in find()
    report(doomed.kind, doomed.name, "deleted")


def forget_cluster(ctx: Context, plan: DownPlan) -> None:
    """Drop what no longer exists from local state; the state goes entirely unless the bucket is kept."""
    state = ctx.store.load(plan.cluster)
    if state is None:
        return
    keys.forget_host_keys(ctx.store.cluster_dir(plan.cluster))
    if plan.kept_bucket:
        state.resources = [r for r in state.resources if r.kind in ("bucket", "iam")]
        state.workers = []
        end_runs_with_the_tpu(state)
        state.log("down", "deleted the TPU and VM; kept the bucket")
        ctx.store.save(state)
    else:
        ctx.store.delete(plan.cluster)


class Finder:
    def __init__(self, cloud: Cloud, cluster: str, mode: TpuMode) -> None:
        self.cloud = cloud
        self.cluster = cluster
        self.mode = mode
        self.doomed: list[Doomed] = []
        self.left_alone: list[str] = []
        self.queued_nodes: set[tuple[str, str]] = set()  # nodes a queued resource deletes with itself

    def add(self, doomed: Doomed) -> None:
        if doomed not in self.doomed:
            self.doomed.append(doomed)

    def search_zone(self, zone: str) -> None:
        cloud = self.cloud
        if self.mode == "vm":
            for queued in cloud.queued.list_queued(zone):
                if labelled(queued.labels, self.cluster):
                    self.add(Doomed("queued_resource", queued.name, zone))
                    if queued.node_name:
                        self.queued_nodes.add((zone, queued.node_name))
        for node in cloud.tpu_api(self.mode).list_nodes(zone):
            if labelled(node.labels, self.cluster) and (zone, node.name) not in self.queued_nodes:
                self.add(Doomed("tpu", node.name, zone))
        for vm in cloud.vms.list_vms(zone):
            if labelled(vm.labels, self.cluster):
                self.add(Doomed("client_vm", vm.name, zone))

    def check_recorded(self, kind: str, name: str, zone: str | None) -> None:
        """A recorded resource the label search did not find: gone, or someone else's (left alone)."""
        if kind in ("bucket", "iam") or not zone or any(d.name == name and d.kind == kind for d in self.doomed):
            return
        if kind == "tpu":
            found = self.cloud.tpu_api(self.mode).get_node(zone, name)
        elif kind == "queued_resource":
            found = self.cloud.queued.get_queued(zone, name)
        else:
            found = self.cloud.vms.get_vm(zone, name)
        described = f"{kind} {name} in {zone} (no label {CLUSTER_LABEL}={self.cluster})"
        if found is not None and not labelled(found.labels, self.cluster) and described not in self.left_alone:
            self.left_alone.append(described)

    def add_bucket(self, name: str, force: bool) -> None:
        bucket = self.cloud.storage.get_bucket(name)
        if bucket is None:
            return
        if not labelled(bucket.labels, self.cluster):
            self.left_alone.append(f"bucket {name} (no label {CLUSTER_LABEL}={self.cluster})")
            return
        if not force and not self.cloud.storage.bucket_is_empty(name):
            raise CloudError(
                f"bucket gs://{name} is not empty: nothing was deleted",
                "pass --force to delete it with its objects, or drop --delete-bucket to keep it",
            )
        self.add(Doomed("bucket", name))


def expected_names(spec: Spec) -> list[tuple[str, str]]:
    names = [("queued_resource", queued_resource_name(spec))] if spec.tpu.queued else [("tpu", tpu_name(spec))]
    return names + ([("client_vm", client_vm_name(spec))] if spec.client_vm else [])


def zones_to_search(state: ClusterState | None, spec: Spec | None) -> list[str]:
    zones: list[str | None] = []
    if state is not None:
        zones += [state.zone, *(r.zone for r in state.resources)]
    if spec is not None:
        zones += [spec.zone, *spec.tpu.zones]
    return list(dict.fromkeys(zone for zone in zones if zone))


def bucket_of(state: ClusterState | None, spec: Spec | None) -> str | None:
    record = state.resource("bucket") if state else None
    if record is not None:
        return record.name
    return spec.bucket.name if spec is not None and spec.bucket else None
