"""`tpuops down`: delete what tpuops created, found through the state file and, when that is missing or
stale, through the cluster label in the spec's zones; with neither state nor spec, through the label in every
zone of the project (`ops/discover.py`). Anything with our name but not our label is left alone, and "nothing
left" is only ever said after a search that ran to the end.

Two steps so the CLI can confirm in between: `find` (no changes) and `execute`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from tpuops import keys
from tpuops.access import ssh_config
from tpuops.access.cluster import spec_of
from tpuops.access.guard_state import with_guard_state
from tpuops.autostop.client import CostSoFar, held_cost
from tpuops.cloud.base import Cloud, TpuMode
from tpuops.cloud.kinds import HANDLERS, handler
from tpuops.cloud.kinds.base import Doomed, owned_by
from tpuops.cloud.kinds.guard_vm import is_guard
from tpuops.context import Context
from tpuops.errors import CloudError, TpuopsError
from tpuops.ops import autostop as cost_guard
from tpuops.ops import guard as guard_commands
from tpuops.ops.discover import find_in_project
from tpuops.ops.run_records import end_runs_with_the_tpu
from tpuops.ops.status import tpu_mode
from tpuops.plan import Kind, make_plan, tpu_kind
from tpuops.spec import CLUSTER_LABEL, Spec, load_spec
from tpuops.state import TPU_KINDS, ClusterState, TpuRecord, bucket_of

Progress = Callable[[str, str, str], None]
__all__ = ["Doomed", "DownPlan", "DownResult", "delete_one", "execute", "find"]


@dataclass(frozen=True)
class DownPlan:
    cluster: str
    doomed: tuple[Doomed, ...]
    left_alone: tuple[str, ...]  # resources with our name but not our label
    kept_bucket: str | None  # kept unless --delete-bucket
    where: str  # where the search looked, for "nothing was left" ("the spec's zones ...", "project p, ...")
    mode: TpuMode = "vm"


@dataclass(frozen=True)
class DownResult:
    cluster: str
    deleted: tuple[Doomed, ...]
    left_alone: tuple[str, ...]
    kept_bucket: str | None
    where: str  # where the search looked
    cost: CostSoFar | None = None  # what the deleted TPU cost in all, hours held x list $/hour (None: unknown)

    @property
    def nothing_left(self) -> bool:
        return not self.deleted

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "nothing_left": self.nothing_left, "cost": self.cost.as_dict() if self.cost else None}


def find(ctx: Context, target: str, delete_bucket: bool = False, force: bool = False,
         zones: Sequence[str] = ()) -> tuple[DownPlan, Cloud]:
    """What `down` would delete. `target` is a cluster name or a spec file. With neither state nor spec, every
    zone of the project (or `zones`) is searched by label; SearchFailed when that search cannot run to the end."""
    spec: Spec | None = None
    if target.endswith((".yaml", ".yml")) or Path(target).is_file():
        spec = load_spec(target)
        name = spec.name
    else:
        name = target
    state = ctx.store.load(name)
    spec = spec or (spec_of(state) if state else None)
    if state is not None:  # a TPU its guard VM re-created (perhaps in a fallback zone) is looked for too
        state = with_guard_state(ctx, state, spec)
    if state is None and spec is None:
        return find_without_state(ctx, name, zones, delete_bucket, force)
    cloud = ctx.provider_for(spec, state).cloud()
    mode = tpu_mode(state, spec)
    finder = Finder(cloud, name, mode, compute=made_by_compute_engine(state, spec))
    searched = list(zones) or zones_to_search(state, spec)
    for zone in searched:
        finder.search_zone(zone)
    for record in state.resources if state else []:
        finder.check_recorded(record.kind, record.name, record.zone)
        if isinstance(record, TpuRecord) and record.kind == "compute_tpu" and record.parts and record.zone:
            # A slice's template and policy outlive its group deleted by the autostop agent: deleted with it.
            finder.add(Doomed(record.kind, record.name, record.zone))
    if spec is not None and spec.zone:  # names `up` would use, in case state is lost
        for kind, expected in expected_names(spec):
            finder.check_recorded(kind, expected, spec.zone)
    bucket_name = bucket_of(state, spec)
    kept = None
    if delete_bucket:
        for each in buckets_to_delete(state, bucket_name):
            finder.add_bucket(each, force)
    elif bucket_name and cloud.storage.get_bucket(bucket_name) is not None:
        kept = bucket_name
    where = f"{'recorded resources and ' if state else ''}zone(s) {', '.join(searched) or '-'}"
    plan = DownPlan(name, tuple(finder.doomed), tuple(finder.left_alone), kept, where, mode=mode)
    return plan, cloud


def find_without_state(ctx: Context, name: str, zones: Sequence[str], delete_bucket: bool,
                       force: bool) -> tuple[DownPlan, Cloud]:
    """No state and no spec: everything labelled with the cluster's name in the project (every zone, or
    `zones`), as `find_cluster` finds it. Google Cloud is searched: a cluster of the local simulator always
    has state, or a spec that names its provider."""
    found, provider = find_in_project(ctx, name, zones)
    cloud = provider.cloud()
    mode: TpuMode = "node" if found.tpu_nodes and not found.tpu_vms else "vm"
    finder = Finder(cloud, name, mode)
    for queued in found.queued:  # with force: the TPU it created goes with it
        finder.add(Doomed("queued_resource", queued.name, queued.zone))
    for node in (*found.tpu_vms_outside_queued(), *found.tpu_nodes):
        finder.add(Doomed("tpu", node.name, node.zone))
    for made in found.compute_tpus:  # the group (or instance): its VMs, template and policy go with it
        finder.add(Doomed("compute_tpu", made.name, made.zone))
    for vm in found.vms:
        finder.add(Doomed("guard_vm" if is_guard(vm.labels) else "client_vm", vm.name, vm.zone))
    kept = None
    for bucket in found.buckets:
        if delete_bucket:
            finder.add_bucket(bucket.name, force)
        else:
            kept = kept or bucket.name
    return DownPlan(name, tuple(finder.doomed), tuple(finder.left_alone), kept, found.where, mode=mode), cloud


def execute(ctx: Context, plan: DownPlan, cloud: Cloud, progress: Progress | None = None,
            now: float | None = None) -> DownResult:
    """Delete what the plan dooms; `now` (default: the clock's) ends the TPU's time held, for its cost."""
    report = progress or (lambda kind, name, text: None)
    state = ctx.store.load(plan.cluster)
    spec = spec_of(state) if state is not None else None
    cost = None
    if state is not None and any(d.kind in TPU_KINDS for d in plan.doomed):
        cost = held_cost(list_prices=ctx.provider_for(spec, state).list_prices, state=state, spec=spec,
                         now=time.time() if now is None else now)
    if state is not None:  # without state there is no guard process nor agent config here to stop
        stop_guard(ctx, state, spec, report)  # first: it would take the deletions below for a preemption
        if any(d.kind in TPU_KINDS for d in plan.doomed):
            stop_autostop(ctx, state, spec, report)
    # The guard first: left running, it would see the TPU gone and create it again.
    for doomed in (d for d in plan.doomed if d.kind == "guard_vm"):
        delete_one(cloud, plan.mode, doomed, report)
    if plan.doomed:
        # The bucket last: the trainer may still be writing to it until its TPU is gone.
        zonal = [d for d in plan.doomed if handler(d.kind).zonal and d.kind != "guard_vm"]
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="down") as pool:
            futures = [pool.submit(delete_one, cloud, plan.mode, doomed, report) for doomed in zonal]
        for future in futures:
            future.result()
        for doomed in (d for d in plan.doomed if not handler(d.kind).zonal):
            delete_one(cloud, plan.mode, doomed, report)
        still = [d.name for d in plan.doomed if d.kind == "bucket" and cloud.storage.get_bucket(d.name) is not None]
        if still:
            raise CloudError(f"bucket {', '.join(f'gs://{name}' for name in still)} still exists after its deletion",
                             "run `tpuops down --delete-bucket` again")
    forget_cluster(ctx, plan, state)
    return DownResult(plan.cluster, plan.doomed, plan.left_alone, plan.kept_bucket, plan.where, cost)


def stop_guard(ctx: Context, state: ClusterState, spec: Spec | None, report: Progress) -> None:
    try:
        stopped = guard_commands.stop_guard(ctx, state, spec)
    except TpuopsError as err:
        report("guard", state.name, f"could not stop the guard ({err.message}); deleting anyway")
        return
    if stopped:
        report("guard", state.name, "stopped")


def stop_autostop(ctx: Context, state: ClusterState, spec: Spec | None, report: Progress) -> None:
    """The agent goes first, so it does not race the deletion (best effort: the TPU is deleted anyway)."""
    try:
        stopped = cost_guard.stop_before_down(ctx, state, spec)
    except TpuopsError as err:
        report("autostop", state.name, f"could not stop the agent ({err.message}); deleting anyway")
        return
    if stopped is not None:
        report("autostop", stopped.worker, "stopped" if stopped.error is None else f"not stopped: {stopped.error}")


def delete_one(cloud: Cloud, mode: TpuMode, doomed: Doomed, report: Progress) -> None:
    report(doomed.kind, doomed.name, "deleting")
    handler(doomed.kind).delete(cloud, mode, doomed)
    report(doomed.kind, doomed.name, "deleted")


def forget_cluster(ctx: Context, plan: DownPlan, state: ClusterState | None) -> None:
    """Drop what no longer exists from local state (as `execute` read it after the confirmation); the state
    goes entirely unless the bucket is kept."""
    from tpuops.ops.push import forget_pushes

    forget_pushes(ctx, plan.cluster)
    ssh_config.forget(ctx.store.home, plan.cluster)
    if state is None:
        return
    keys.forget_host_keys(ctx.store.cluster_dir(plan.cluster))
    if plan.kept_bucket:
        state.resources = [r for r in state.resources if not handler(r.kind).zonal]
        state.workers = []
        end_runs_with_the_tpu(state)
        state.log("down", "deleted the TPU and VM; kept the bucket")
        ctx.store.save(state)
    else:
        ctx.store.delete(plan.cluster)


def buckets_to_delete(state: ClusterState | None, spec_bucket: str | None) -> list[str]:
    """Every bucket the state recorded (a run that moved across regions has one in each), else the spec's; each
    still checked to carry the cluster's label before it is deleted (Finder.add_bucket)."""
    recorded = state.recorded_buckets() if state is not None else []
    return recorded or ([spec_bucket] if spec_bucket else [])


def made_by_compute_engine(state: ClusterState | None, spec: Spec | None) -> bool:
    """Whether the cluster's TPU is (or was) a Compute Engine one: only then are zones searched for those."""
    return (spec is not None and tpu_kind(spec) == "compute_tpu") or \
        (state is not None and state.resource("compute_tpu") is not None)


class Finder:
    def __init__(self, cloud: Cloud, cluster: str, mode: TpuMode, compute: bool = True) -> None:
        self.cloud = cloud
        self.cluster = cluster
        self.mode = mode
        self.compute = compute  # search zones for Compute Engine TPUs too (a project may not use that API)
        self.doomed: list[Doomed] = []
        self.left_alone: list[str] = []
        self.brought_along: set[Doomed] = set()  # TPUs a queued resource deletes with itself

    def add(self, doomed: Doomed) -> None:
        if doomed not in self.doomed:
            self.doomed.append(doomed)

    def search_zone(self, zone: str) -> None:
        """Everything in `zone` with our label; a TPU a queued resource deletes with itself is not listed."""
        for each in HANDLERS.values():
            if not each.zonal or (each.kind == "compute_tpu" and not self.compute):
                continue
            for finding in each.find(self.cloud, self.mode, self.cluster, zone):
                if finding.doomed in self.brought_along:
                    continue
                self.add(finding.doomed)
                self.brought_along.update(finding.brings_along)

    def check_recorded(self, kind: Kind, name: str, zone: str | None) -> None:
        """A recorded resource the label search did not find: gone, or someone else's (left alone)."""
        each = handler(kind)
        if not each.zonal or not zone or any(d.name == name and d.kind == kind for d in self.doomed):
            return
        labels = each.labels(self.cloud, self.mode, name, zone)
        described = f"{kind} {name} in {zone} (no label {CLUSTER_LABEL}={self.cluster})"
        if labels is not None and not owned_by(labels, self.cluster) and described not in self.left_alone:
            self.left_alone.append(described)

    def add_bucket(self, name: str, force: bool) -> None:
        bucket = self.cloud.storage.get_bucket(name)
        if bucket is None:
            return
        if not owned_by(bucket.labels, self.cluster):
            self.left_alone.append(f"bucket {name} (no label {CLUSTER_LABEL}={self.cluster})")
            return
        if not force and not self.cloud.storage.bucket_is_empty(name):
            raise CloudError(
                f"bucket gs://{name} is not empty: nothing was deleted",
                "pass --force to delete it with its objects, or drop --delete-bucket to keep it",
            )
        self.add(Doomed("bucket", name))


def expected_names(spec: Spec) -> list[tuple[Kind, str]]:
    """The zonal resources `up` would make for this spec, by kind and name."""
    return [(action.kind, action.name) for action in make_plan(spec).actions if handler(action.kind).zonal]


def zones_to_search(state: ClusterState | None, spec: Spec | None) -> list[str]:
    zones: list[str | None] = []
    if state is not None:
        zones += [state.zone, *(r.zone for r in state.resources)]
    if spec is not None:
        zones += [spec.zone, *spec.tpu.zones]
    return list(dict.fromkeys(zone for zone in zones if zone))
