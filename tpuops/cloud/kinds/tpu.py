"""The TPU, created directly (kind tpu) or through a queued resource (kind queued_resource).

Both try the spec's zone and then `tpu.zones` when a zone has no capacity, within --wait-for-capacity; a TPU
found PREEMPTED or TERMINATED (a queued resource FAILED or SUSPENDED) is deleted and created again, since it
holds quota until deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tpuops import catalog, retry
from tpuops.cloud.base import (
    DEAD_TPU_STATES,
    Cloud,
    HostKey,
    QueuedResource,
    TpuMode,
    TpuNode,
    TpuRequest,
    Worker,
)
from tpuops.cloud.kinds.base import (
    MISSING,
    Described,
    Doomed,
    Finding,
    Found,
    Job,
    Known,
    ResourceStatus,
    owned_by,
)
from tpuops.cloud.queued import create_queued_within, waiting_age, withdraw_queued
from tpuops.durations import format_duration
from tpuops.errors import CapacityError, CloudError
from tpuops.plan import (
    Action,
    Kind,
    ObservedResource,
    client_vm_name,
    node_names,
    queued_resource_name,
    tpu_kind,
    tpu_name,
)
from tpuops.spec import CLUSTER_LABEL, Spec
from tpuops.state import ResourceRecord, TpuRecord, now_iso

READY = "READY"
ACTIVE = "ACTIVE"


class TpuKind:
    kind: Kind = "tpu"
    zonal = True

    def depends_on(self, spec: Spec) -> tuple[Kind, ...]:
        return ()

    def observe(self, job: Job, known: Known) -> Found:
        api = job.cloud.tpu_api(job.spec.tpu.mode)
        return observe_in_zones(job, self.kind, lambda zone: api.get_node(zone, tpu_name(job.spec)))

    def ensure(self, job: Job, action: Action, known: Known) -> Found:
        if action.verb == "recreate":
            delete_to_recreate(job, action, lambda zone: self.delete(job.cloud, job.spec.tpu.mode,
                                                                     Doomed(self.kind, action.name, zone)))
        node = self.create(job, action) if action.verb in ("create", "recreate") else self.wait_kept(job, action)
        slices = self.every_slice(job, action, node)
        job.progress(self.kind, action.name, f"{node.state} in {node.zone}")
        return Found(ObservedResource(self.kind, action.name, node.state, True, node.zone), node=node, slices=slices)

    def create(self, job: Job, action: Action) -> TpuNode:
        """In the spec's zone, then each of tpu.zones (a queued resource waits in each as `create_in` says)."""
        return create_in_some_zone(job, action, self.attempt_in)

    def every_slice(self, job: Job, action: Action, first: TpuNode) -> tuple[TpuNode, ...]:
        """Every slice's node once the first is ready: one TPU made directly is one slice."""
        return (first,)

    def attempt_in(self, job: Job, action: Action, zone: str) -> ZoneAttempt:
        request = tpu_request(job, zone)
        return ZoneAttempt({"node": request.name, "mode": request.mode},
                           lambda: self.create_in(job, action, request))

    def create_in(self, job: Job, action: Action, request: TpuRequest) -> TpuNode:
        return job.cloud.tpu_api(request.mode).create_node(request)

    def wait_kept(self, job: Job, action: Action) -> TpuNode:
        """A kept TPU: maybe still CREATING after an interrupted `up`."""
        zone = action.zone or job.spec.zone or ""
        node = wait_node_ready(job, zone, node_names(job.spec)[0])
        record_created(job, action, zone, node)
        return node

    def delete(self, cloud: Cloud, mode: TpuMode, doomed: Doomed) -> None:
        cloud.tpu_api(mode).delete_node(doomed.zone or "", doomed.name)

    def describe(self, cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> Described:
        zone = record.zone or ""
        node = cloud.tpu_api(mode).get_node(zone, node_name(record)) if zone else None
        if node is None:
            return Described(ResourceStatus(self.kind, record.name, zone, MISSING))
        return Described(node_row(node, record.name), node)

    def find(self, cloud: Cloud, mode: TpuMode, cluster: str, zone: str) -> list[Finding]:
        return [Finding(Doomed(self.kind, node.name, zone)) for node in cloud.tpu_api(mode).list_nodes(zone)
                if owned_by(node.labels, cluster)]

    def labels(self, cloud: Cloud, mode: TpuMode, name: str, zone: str) -> Mapping[str, str] | None:
        node = cloud.tpu_api(mode).get_node(zone, name)
        return None if node is None else node.labels


class QueuedKind(TpuKind):
    """A queued resource: Google creates the TPU when capacity frees up (TPU VMs only)."""

    kind: Kind = "queued_resource"

    def observe(self, job: Job, known: Known) -> Found:
        name = queued_resource_name(job.spec)
        for zone in candidate_zones(job.spec, job.ledger.recorded(self.kind)):
            queued = job.cloud.queued.get_queued(zone, name)
            if queued is not None:
                node = job.cloud.tpus.get_node(zone, node_names(job.spec)[0])
                owned = owned_by(queued.labels, job.spec.name)
                return Found(ObservedResource(self.kind, name, queued.state, owned, zone), node=node)
        return Found()

    def create_in(self, job: Job, action: Action, request: TpuRequest) -> TpuNode:
        """Queue the TPU, valid only as long as `up` waits for it (--wait-for-capacity, or the operation
        timeout): a FAILED request (it holds quota), a timed-out wait or an error withdraws it, so nothing is
        granted later to nobody."""
        wait_seconds = job.knobs.wait_for_capacity or job.knobs.operation_timeout
        job.progress(self.kind, action.name, f"queued in {request.zone}, valid for {wait_seconds:.0f}s",
                     phase="waiting")
        create_queued_within(job.cloud.queued, action.name, request, wait_seconds, cluster=job.spec.name)
        return wait_node_ready(job, request.zone, node_names(job.spec)[0])

    def wait_kept(self, job: Job, action: Action) -> TpuNode:
        """A queued resource still waiting for capacity (after an interrupted `up`), then its TPU; withdrawn
        when the wait ends without it."""
        zone = action.zone or job.spec.zone or ""
        job.progress(self.kind, action.name, "waiting for the queued resource to become ACTIVE", phase="waiting")
        limit = job.knobs.wait_for_capacity or job.knobs.operation_timeout
        try:
            retry.poll(lambda: job.cloud.queued.get_queued(zone, action.name),
                       lambda queued: queued is not None and queued.state == ACTIVE,
                       interval=job.knobs.poll_interval, timeout=limit,
                       on_timeout=timed_out(f"queued resource {action.name}", limit))
        except BaseException as err:
            withdraw_queued(job.cloud.queued, zone, action.name, cluster=job.spec.name,
                            owned_if={CLUSTER_LABEL: job.spec.name}, because=err)
            raise
        return super().wait_kept(job, action)

    def every_slice(self, job: Job, action: Action, first: TpuNode) -> tuple[TpuNode, ...]:
        """Multislice: the other slices' nodes too (ACTIVE means all of them are granted), recorded in slice order."""
        names = node_names(job.spec)
        if len(names) == 1:
            return (first,)
        nodes = (first, *(wait_node_ready(job, first.zone, name) for name in names[1:]))
        job.ledger.record(self.kind, action.name, first.zone, "created", nodes=list(names))
        return nodes

    def delete(self, cloud: Cloud, mode: TpuMode, doomed: Doomed) -> None:
        cloud.queued.delete_queued(doomed.zone or "", doomed.name)  # with force: its TPU goes too

    def describe(self, cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> Described:
        zone = record.zone or ""
        names = record.node_names if isinstance(record, TpuRecord) else [record.name]
        nodes = {name: cloud.tpu_api(mode).get_node(zone, name) if zone else None for name in names}
        node = nodes[names[0]]
        queued = cloud.queued.get_queued(zone, record.name) if zone else None
        lost, slices = (lost_slice(nodes), tuple(nodes.values())) if len(nodes) > 1 else (None, ())
        if queued is None:
            return Described(ResourceStatus(self.kind, record.name, zone, MISSING, nodes_text(nodes)), node, MISSING,
                             lost, slices)
        return Described(queued_row(queued, nodes), node, queued.state, lost, slices)

    def find(self, cloud: Cloud, mode: TpuMode, cluster: str, zone: str) -> list[Finding]:
        if mode != "vm":
            return []
        return [Finding(Doomed(self.kind, queued.name, zone),
                        tuple(Doomed("tpu", name, zone) for name in queued.node_names))
                for queued in cloud.queued.list_queued(zone) if owned_by(queued.labels, cluster)]

    def labels(self, cloud: Cloud, mode: TpuMode, name: str, zone: str) -> Mapping[str, str] | None:
        queued = cloud.queued.get_queued(zone, name)
        return None if queued is None else queued.labels


# ------------------------------------------------------------------------------------------ shared


def node_row(node: TpuNode, name: str | None = None) -> ResourceStatus:
    """A TPU as `status` shows it."""
    detail = f"{node.accelerator_type}, health {node.health or '-'}, {len(node.workers)} worker(s)"
    return ResourceStatus("tpu", name or node.name, node.zone, node.state, detail)


def lost_slice(nodes: Mapping[str, TpuNode | None]) -> str | None:
    """The first slice whose node is gone or dead: the queued resource may still say ACTIVE for a while, but
    Multislice cannot go on without it."""
    for name, node in nodes.items():
        if node is None or node.state in DEAD_TPU_STATES:
            return f"{name} {node.state if node else MISSING}"
    return None


def nodes_text(nodes: Mapping[str, TpuNode | None]) -> str:
    """`node x: READY`, or with Multislice `nodes x-0: READY, x-1: PREEMPTED`."""
    states = ", ".join(f"{name}: {node.state if node else 'not created'}" for name, node in nodes.items())
    return f"node{'s' * (len(nodes) > 1)} {states or '-'}"


def queued_row(queued: QueuedResource, nodes: Mapping[str, TpuNode | None]) -> ResourceStatus:
    """A queued resource as `status` shows it: its nodes, and how long it has waited, if it still waits."""
    detail = nodes_text(nodes)
    waited = waiting_age(queued)
    if waited is not None:  # a request left waiting may be granted later and bill a TPU nobody uses
        detail += f", waiting for capacity for {format_duration(waited)}"
    return ResourceStatus("queued_resource", queued.name, queued.zone, queued.state, detail)


def candidate_zones(spec: Spec, recorded: ResourceRecord | None) -> list[str]:
    """Where a TPU of this cluster may be: where state says, the spec's zone, then its fallback zones."""
    zones = [recorded.zone if recorded else None, spec.zone, *spec.tpu.zones]
    return list(dict.fromkeys(zone for zone in zones if zone))


def observe_in_zones(job: Job, kind: Kind, get_node: Callable[[str], TpuNode | None]) -> Found:
    """The cluster's TPU in the first of its candidate zones that has it."""
    for zone in candidate_zones(job.spec, job.ledger.recorded(kind)):
        node = get_node(zone)
        if node is not None:
            owned = owned_by(node.labels, job.spec.name)
            return Found(ObservedResource(kind, node.name, node.state, owned, zone), node=node)
    return Found()


def delete_to_recreate(job: Job, action: Action, delete: Callable[[str], None]) -> None:
    """A dead TPU deleted (in its zone) before it is made again; its workers' facts forgotten with it."""
    zone = action.zone or job.spec.zone or ""
    job.ledger.record(action.kind, action.name, zone, "deleting")
    job.progress(action.kind, action.name, f"deleting ({action.reason})")
    delete(zone)
    job.ledger.forget_workers()


def node_name(record: ResourceRecord) -> str:
    return (record.node if isinstance(record, TpuRecord) else None) or record.name


@dataclass(frozen=True)
class ZoneAttempt:
    """Creating the TPU in one zone: what the ledger records before it starts (so an interrupted `up` finds it,
    and `down` deletes it), and the create itself (blocks until READY, CapacityError when the zone has none)."""

    facts: Mapping[str, object]
    create: Callable[[], TpuNode]


AttemptIn = Callable[[Job, Action, str], ZoneAttempt]


def create_in_some_zone(job: Job, action: Action, attempt_in: AttemptIn) -> TpuNode:
    """The spec's zone, then each of tpu.zones; with --wait-for-capacity, all of them again until it runs out."""
    spec = job.spec
    zones = list(dict.fromkeys([spec.zone or "", *spec.tpu.zones]))

    def try_every_zone() -> TpuNode:
        failures: list[str] = []
        for zone in zones:
            attempt = attempt_in(job, action, zone)
            job.ledger.record(action.kind, action.name, zone, "creating", **attempt.facts)
            job.progress(action.kind, action.name, f"creating in {zone}")
            try:
                node = attempt.create()
            except CapacityError as err:
                failures.append(f"{zone}: {err.message}")
                job.progress(action.kind, action.name, f"no capacity in {zone}", phase="waiting")
                continue
            record_created(job, action, zone, node)
            return node
        raise CapacityError(
            f"no capacity for {spec.tpu.type} ({'; '.join(failures)})",
            "rerun with --wait-for-capacity 2h to keep trying, or add zones in the region to tpu.zones",
        )

    if job.knobs.wait_for_capacity <= 0:
        return try_every_zone()
    policy = retry.bounded_by(job.knobs.wait_for_capacity, initial=job.knobs.capacity_backoff,
                              retry_on=CapacityError)
    return policy(try_every_zone)


def record_created(job: Job, action: Action, zone: str, node: TpuNode) -> None:
    # A legacy Node is reached over gRPC at its hosts' addresses (launch gives them to the trainer).
    node_ips = [w.internal_ip for w in node.workers] if node.mode == "node" else []
    recorded = job.ledger.recorded(action.kind)
    created_at = (recorded.created_at if isinstance(recorded, TpuRecord) and recorded.status == "created"
                  and recorded.node == node.name else None) or now_iso()
    job.ledger.record(action.kind, action.name, zone, "created", node=node.name, mode=node.mode, node_ips=node_ips,
                      created_at=created_at)


class Stated(Protocol):
    @property
    def state(self) -> str: ...


S = TypeVar("S", bound=Stated)


def wait_node_ready(job: Job, zone: str, name: str) -> TpuNode:
    api = job.cloud.tpu_api(job.spec.tpu.mode)
    return wait_ready(job, name, lambda: api.get_node(zone, name))


def wait_ready(job: Job, name: str, get: Callable[[], S | None], why: Callable[[S], str] = lambda _: "") -> S:
    """TPU `name` (as `get` reads it) once it is no longer CREATING; an error unless it is READY then (`why`: what
    the API says of a state)."""
    found = retry.poll(get, lambda seen: seen is None or seen.state != "CREATING",
                       interval=job.knobs.poll_interval, timeout=job.knobs.operation_timeout,
                       on_timeout=timed_out(f"TPU {name} to be ready", job.knobs.operation_timeout))
    if found is None:
        raise CloudError(f"TPU {name} disappeared while it was being created", "rerun `tpuops up`")
    if found.state != READY:
        reason = why(found)
        raise CloudError(f"TPU {name} is {found.state}{f' ({reason})' if reason else ''}, not READY",
                         "run `tpuops down` then `tpuops up`")
    return found


def timed_out(what: str, limit: float) -> Callable[[], CloudError]:
    return lambda: CloudError(f"timed out after {limit:.0f}s waiting for {what}", "rerun `tpuops up` to keep waiting")


def tpu_request(job: Job, zone: str) -> TpuRequest:
    spec, tpu = job.spec, job.spec.tpu
    framework = spec.trainer.framework if spec.trainer else None
    cat = catalog.load()
    accelerator = cat.accelerator(tpu.type)
    runtime = tpu.runtime or (cat.default_runtime(accelerator, tpu.mode, framework) if accelerator else None)
    return TpuRequest(
        name=tpu_name(spec),
        zone=zone,
        accelerator_type=tpu.type,
        runtime=runtime or "",
        mode=tpu.mode,
        preemptible=tpu.preemptible,
        spot=tpu.spot,
        service_account=tpu.service_account,
        network=tpu.network,
        subnetwork=tpu.subnetwork,
        labels=spec.resource_labels,
        ssh_keys=job.ssh_keys if tpu.mode == "vm" else None,
        workers=tpu.workers,  # only the local provider simulates a chosen number of hosts
        slices=tpu.slices,
        reservation=reservation_name(job.ledger.state.project, zone, tpu.pools[0].reservation)
        if tpu.pools and tpu.pools[0].reservation and tpu.through_queue else None,
    )


def reservation_name(project: str | None, zone: str, reservation: str | None) -> str | None:
    """A pool's `reservation` as the queued resource names it: a full name as written, else
    projects/PROJECT/locations/ZONE/reservations/NAME."""
    if not reservation or "/" in reservation:
        return reservation
    return f"projects/{project or '-'}/locations/{zone}/reservations/{reservation}"


def reachable_hosts(cloud: Cloud, spec: Spec, node: TpuNode) -> tuple[list[Worker], list[HostKey]]:
    """The hosts tpuops connects to and their host keys: the TPU VM's workers, or a legacy Node's client VM
    (the Node's own hosts cannot be reached)."""
    if spec.tpu.mode == "vm":
        api = cloud.compute_tpus if tpu_kind(spec) == "compute_tpu" else cloud.tpus
        return list(node.workers), api.host_keys(node.zone, node.name)  # type: ignore[union-attr]
    vm = cloud.vms.get_vm(node.zone, client_vm_name(spec)) if spec.client_vm else None
    if vm is None:
        return [], []
    return [Worker(0, vm.internal_ip or "", vm.external_ip)], cloud.vms.host_keys(vm.zone, vm.name)
