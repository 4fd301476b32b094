"""A legacy TPU Node's client VM: the machine the trainer runs on, in the zone the TPU found capacity in."""

from __future__ import annotations

from collections.abc import Mapping

from tpuops.cloud.base import Vm, VmRequest
from tpuops.cloud.compute_tpu import is_compute_tpu
from tpuops.cloud.kinds.base import (
    Found,
    Job,
    Known,
    ResourceStatus,
    owned_by,
)
from tpuops.cloud.kinds.guard_vm import is_guard
from tpuops.cloud.kinds.vms import VmKindBase
from tpuops.plan import Action, Kind, ObservedResource, client_vm_name, tpu_kind
from tpuops.spec import Spec


class ClientVmKind(VmKindBase):
    kind: Kind = "client_vm"

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

    def is_mine(self, labels: Mapping[str, str]) -> bool:
        return not is_guard(labels) and not is_compute_tpu(labels)  # a TPU host is its own kind's

    def row(self, vm: Vm) -> ResourceStatus:
        return vm_row(vm)


def tpu_zone(job: Job, known: Known) -> str:
    """The zone of the TPU as known so far, else the spec's."""
    tpu = known.get(tpu_kind(job.spec))
    return tpu.node.zone if tpu is not None and tpu.node is not None else (job.spec.zone or "")


def vm_row(vm: Vm) -> ResourceStatus:
    """The client VM as `status` shows it."""
    return ResourceStatus("client_vm", vm.name, vm.zone, vm.state,
                          f"internal {vm.internal_ip or '-'}, external {vm.external_ip or '-'}")
