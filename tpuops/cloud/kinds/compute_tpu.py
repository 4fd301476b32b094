"""The TPU made by Compute Engine (tpu.api: compute), kind compute_tpu: one instance, or a slice (workload policy,
instance template, managed instance group) observed, ensured, described and deleted as one resource, since a slice
is whole or made again whole. It reads as a TpuNode to `up`'s workers, `status`, `watch` and the guard: ranks as
worker indexes, PREEMPTED and BROKEN among the dead TPU states.

The zones are tried as for a TPU VM (the spec's zone, then tpu.zones, within --wait-for-capacity).
"""

from __future__ import annotations

from collections.abc import Mapping

from tpuops import catalog
from tpuops.cloud.base import Cloud, TpuMode, TpuNode, Worker
from tpuops.cloud.compute_tpu import (
    ACCELERATOR_LABEL,
    ComputeTpuApi,
    Provisioning,
    TpuSlice,
    TpuVmRequest,
    policy_name,
    template_name,
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
)
from tpuops.cloud.kinds.tpu import (
    ZoneAttempt,
    create_in_some_zone,
    delete_to_recreate,
    observe_in_zones,
    record_created,
    wait_ready,
)
from tpuops.errors import CloudError, SpecError
from tpuops.plan import Action, Kind, ObservedResource, tpu_name
from tpuops.spec import CLUSTER_LABEL, Spec
from tpuops.state import ResourceRecord, TpuRecord


def compute_api(cloud: Cloud) -> ComputeTpuApi:
    if cloud.compute_tpus is None:
        raise CloudError("this provider cannot make TPUs through Compute Engine", "use tpu.api: tpu")
    return cloud.compute_tpus


class ComputeTpuKind:
    kind: Kind = "compute_tpu"
    zonal = True

    def depends_on(self, spec: Spec) -> tuple[Kind, ...]:
        return ()

    def observe(self, job: Job, known: Known) -> Found:
        api = compute_api(job.cloud)

        def node_in(zone: str) -> TpuNode | None:
            found = api.get_tpu_vm(zone, tpu_name(job.spec))
            return None if found is None else as_tpu_node(found, job.spec.tpu.type)

        return observe_in_zones(job, self.kind, node_in)

    def ensure(self, job: Job, action: Action, known: Known) -> Found:
        if action.verb == "recreate":
            delete_to_recreate(job, action, lambda zone: compute_api(job.cloud).delete_tpu_vm(zone, action.name))
        node = self.create(job, action) if action.verb in ("create", "recreate") else self.wait_kept(job, action)
        job.progress(self.kind, action.name, f"{node.state} in {node.zone}")
        return Found(ObservedResource(self.kind, action.name, node.state, True, node.zone), node=node)

    def create(self, job: Job, action: Action) -> TpuNode:
        """In the zones as a TPU VM is. A refused create leaves nothing behind (the adapter deletes what it made),
        so the next zone starts clean."""
        if action.verb == "create":
            self.clear_leftovers(job)
        return create_in_some_zone(job, action, self.attempt_in)

    def attempt_in(self, job: Job, action: Action, zone: str) -> ZoneAttempt:
        request = compute_request(job.spec, zone, job.ssh_keys)
        return ZoneAttempt({"node": request.name, "mode": "vm", "parts": parts_of(request)},
                           lambda: as_tpu_node(compute_api(job.cloud).create_tpu_vm(request), job.spec.tpu.type))

    def clear_leftovers(self, job: Job) -> None:
        """A slice's template and policy outlive a group the autostop agent deleted (or an interrupted `up`): a
        create would take them as made by its own earlier attempt, with what they said then. Delete them first."""
        recorded = job.ledger.recorded(self.kind)
        if isinstance(recorded, TpuRecord) and recorded.parts and recorded.zone:
            left = ", ".join(recorded.parts)
            job.progress(self.kind, recorded.name, f"deleting what the earlier slice left ({left})")
            compute_api(job.cloud).delete_tpu_vm(recorded.zone, recorded.name)

    def wait_kept(self, job: Job, action: Action) -> TpuNode:
        """A kept TPU: maybe still CREATING after an interrupted `up`."""
        zone = action.zone or job.spec.zone or ""
        api = compute_api(job.cloud)
        found = wait_ready(job, action.name, lambda: api.get_tpu_vm(zone, action.name), lambda s: s.detail)
        node = as_tpu_node(found, job.spec.tpu.type)
        record_created(job, action, zone, node)
        return node

    def delete(self, cloud: Cloud, mode: TpuMode, doomed: Doomed) -> None:
        compute_api(cloud).delete_tpu_vm(doomed.zone or "", doomed.name)

    def describe(self, cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> Described:
        zone = record.zone or ""
        found = compute_api(cloud).get_tpu_vm(zone, record.name) if zone else None
        if found is None:
            return Described(ResourceStatus(self.kind, record.name, zone, MISSING))
        node = slice_node(found)
        return Described(slice_row(found, node), node)

    def find(self, cloud: Cloud, mode: TpuMode, cluster: str, zone: str) -> list[Finding]:
        if cloud.compute_tpus is None or mode != "vm":
            return []
        return [Finding(Doomed(self.kind, found.name, zone))
                for found in cloud.compute_tpus.find_tpu_vms({CLUSTER_LABEL: cluster}, [zone])]

    def labels(self, cloud: Cloud, mode: TpuMode, name: str, zone: str) -> Mapping[str, str] | None:
        found = compute_api(cloud).get_tpu_vm(zone, name)
        return None if found is None else found.labels


def slice_node(found: TpuSlice) -> TpuNode:
    """A slice found without its spec: its accelerator type from its label."""
    return as_tpu_node(found, found.labels.get(ACCELERATOR_LABEL, found.machine_type))


def slice_row(found: TpuSlice, node: TpuNode) -> ResourceStatus:
    """`status`: whole (READY) or not, and why; the group's accelerator topology for a slice."""
    what = f"{node.accelerator_type} as {len(found.hosts)} of {found.expected_hosts} x {found.machine_type}"
    topology = f", topology {found.topology_state}" if found.multi_host else ""
    why = f", {found.detail}" if found.detail else ""
    return ResourceStatus("compute_tpu", found.name, found.zone, found.state,
                          f"{what}, {found.provisioning}{topology}{why}")


def parts_of(request: TpuVmRequest) -> list[str]:
    """What Compute Engine makes besides the group or the instance named after the TPU."""
    return [f"workload policy {policy_name(request.name)}", f"instance template {template_name(request.name)}"] \
        if request.multi_host else []


def provisioning(spec: Spec) -> Provisioning:
    tpu = spec.tpu
    if tpu.flex_start:
        return "flex-start"
    if tpu.reservation:
        return "reservation-bound"
    return "spot" if tpu.spot else "standard"


def compute_request(spec: Spec, zone: str, ssh_keys: str | None) -> TpuVmRequest:
    """The TPU the spec asks Compute Engine for in `zone` (the catalog's machine type, image, disk, topology)."""
    shape = catalog.load().compute_shape(spec.tpu.type)
    if shape is None:  # rules.py refuses such a spec before anything runs; this guards a caller that skipped it
        raise SpecError(f"{spec.tpu.type} has no Compute Engine shape in the catalog", "see `tpuops catalog`")
    tpu = spec.tpu
    return TpuVmRequest(
        name=tpu_name(spec), zone=zone, accelerator_type=tpu.type, machine_type=shape.machine_type,
        hosts=shape.hosts, image_project=shape.image_project, image_family=shape.image_family,
        boot_disk_type=shape.boot_disk_type, boot_disk_gb=shape.boot_disk_gb, topology=shape.topology,
        provisioning=provisioning(spec), max_run_seconds=tpu.flex_start_seconds, reservation=tpu.reservation,
        network=tpu.network, subnetwork=tpu.subnetwork, labels=spec.resource_labels, ssh_keys=ssh_keys,
        service_account=tpu.service_account,
    )


def as_tpu_node(found: TpuSlice, accelerator_type: str) -> TpuNode:
    """The slice as the workflows read a TPU: workers indexed by rank, the slice's state as the node's."""
    workers = tuple(Worker(index=host.rank, internal_ip=host.internal_ip, external_ip=host.external_ip,
                           home=host.home) for host in found.hosts)
    health = "HEALTHY" if found.state == "READY" else "UNHEALTHY" if found.state in ("BROKEN", "PREEMPTED") else None
    return TpuNode(name=found.name, zone=found.zone, accelerator_type=accelerator_type, state=found.state,
                   mode="vm", health=health, runtime=None, workers=workers, labels=found.labels,
                   spot=found.provisioning == "spot")
