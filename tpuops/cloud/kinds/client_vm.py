"""A legacy TPU Node's client VM: the machine the trainer runs on, in the zone the TPU found capacity in."""

from __future__ import annotations

from collections.abc import Mapping

from tpuops.cloud.base import Cloud, TpuMode, Vm, VmRequest
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
from tpuops.cloud.kinds.guard_vm import is_guard
from tpuops.plan import Action, Kind, ObservedResource, client_vm_name, tpu_kind
from tpuops.spec import Spec
from tpuops.state import ResourceRecord


class ClientVmKind:
    kind: Kind = "client_vm"
    zonal = True

    def depends_on(self, spec: Spec) -> tuple[Kind, ...]:
        # With fallback zones the VM must wait to learn where the TPU found capacity.
        return (tpu_kind(spec),) if spec.tpu.zones else ()

    def observe(self, job: Job, known: Known) -> Found:
        vm = job.cloud.vms.get_vm(tpu_zone(job, known), client_vm_name(job.spec))
        if vm is None:
            return Found()
        return Found(ObservedResource("client_vm", vm.name, vm.state, owned_by(vm.labels, job.spec.name), vm.zone))

    def ensure(self, job: Job, action: Action, known: Known) -> Found:
        vm_spec, spec = job.spec.client_vm, job.spec
        assert vm_spec is not None
        zone = tpu_zone(job, known) if action.verb != "keep" else (action.zone or tpu_zone(job, known))
        if action.verb == "create":
            job.ledger.record("client_vm", action.name, zone, "creating")
            job.progress("client_vm", action.name, f"creating in {zone}")
            job.cloud.vms.create_vm(VmRequest(
                name=action.name,
                zone=zone,
                machine_type=vm_spec.machine_type,
                disk_gb=vm_spec.disk_gb,
                image_project=vm_spec.image_project,
                image_family=vm_spec.image_family,
                network=spec.tpu.network,
                subnetwork=spec.tpu.subnetwork,
                labels=spec.resource_labels,
                ssh_keys=job.ssh_keys,
            ))
        job.ledger.record("client_vm", action.name, zone, "created")
        job.progress("client_vm", action.name, "ready")
        return Found(ObservedResource("client_vm", action.name, None, True, zone))

    def delete(self, cloud: Cloud, mode: TpuMode, doomed: Doomed) -> None:
        cloud.vms.delete_vm(doomed.zone or "", doomed.name)

    def describe(self, cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> Described:
        zone = record.zone or ""
        vm = cloud.vms.get_vm(zone, record.name)
        if vm is None:
            return Described(ResourceStatus("client_vm", record.name, zone, MISSING))
        return Described(vm_row(vm))

    def find(self, cloud: Cloud, mode: TpuMode, cluster: str, zone: str) -> list[Finding]:
        return [Finding(Doomed("client_vm", vm.name, zone)) for vm in cloud.vms.list_vms(zone)
                if owned_by(vm.labels, cluster) and not is_guard(vm.labels)]

    def labels(self, cloud: Cloud, mode: TpuMode, name: str, zone: str) -> Mapping[str, str] | None:
        vm = cloud.vms.get_vm(zone, name)
        return None if vm is None else vm.labels


def tpu_zone(job: Job, known: Known) -> str:
    """The zone of the TPU as known so far, else the spec's."""
    tpu = known.get(tpu_kind(job.spec))
    return tpu.node.zone if tpu is not None and tpu.node is not None else (job.spec.zone or "")


def vm_row(vm: Vm) -> ResourceStatus:
    """The client VM as `status` shows it."""
    return ResourceStatus("client_vm", vm.name, vm.zone, vm.state,
                          f"internal {vm.internal_ip or '-'}, external {vm.external_ip or '-'}")
