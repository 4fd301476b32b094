"""The guard VM: one small Compute Engine VM per cluster that runs `tpuops watch NAME --headless` under systemd.

It carries the cluster's label like everything else, so `down` and `status` find it without local state, plus a
role label that tells it from a legacy Node's client VM (which carries the cluster's label alone). It is made by
`tpuops guard up` (providers/gcp_guard_host.py: the startup script needs the staged bundle), never by `up`'s plan;
here it is observed, adopted, described and deleted like the other kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tpuops.cloud.base import Cloud, Vm, VmRequest
from tpuops.cloud.kinds.base import (
    Found,
    Job,
    Known,
    ResourceStatus,
    owned_by,
)
from tpuops.cloud.kinds.vms import VmKindBase
from tpuops.errors import CloudError
from tpuops.plan import Action, Kind, ObservedResource
from tpuops.plan.guard_vm_shape import (
    DISK_GB,
    GUARD_ROLE,
    GUARD_TAG,
    IMAGE_FAMILY,
    IMAGE_PROJECT,
    ROLE_LABEL,
    guard_vm_name,
)
from tpuops.spec import CLUSTER_LABEL, Spec

STOPPED_STATES = frozenset({"TERMINATED", "STOPPED"})  # Compute's words for a VM stopped (by hand or by Google)


def guard_labels(labels: Mapping[str, str], cluster: str) -> dict[str, str]:
    """The spec's labels, the cluster's, and the role that tells a guard VM from a client VM."""
    return {**labels, CLUSTER_LABEL: cluster, ROLE_LABEL: GUARD_ROLE}


def is_guard(labels: Mapping[str, str]) -> bool:
    return labels.get(ROLE_LABEL) == GUARD_ROLE


@dataclass(frozen=True)
class GuardVmSettings:
    """Everything the guard VM is created with."""

    cluster: str
    zone: str
    machine_type: str
    service_account: str | None  # None: the project's Compute default account
    labels: Mapping[str, str]
    startup_script: str
    ssh_keys: str  # the cluster's public key, so `guard up` can copy the private half over SSH
    network: str = "default"
    subnetwork: str | None = None

    @property
    def name(self) -> str:
        return guard_vm_name(self.cluster)


def guard_request(settings: GuardVmSettings) -> VmRequest:
    return VmRequest(
        name=settings.name,
        zone=settings.zone,
        machine_type=settings.machine_type,
        disk_gb=DISK_GB,
        image_project=IMAGE_PROJECT,
        image_family=IMAGE_FAMILY,
        network=settings.network,
        subnetwork=settings.subnetwork,
        labels=guard_labels(settings.labels, settings.cluster),
        ssh_keys=settings.ssh_keys,
        service_account=settings.service_account,
        startup_script=settings.startup_script,
        tags=(GUARD_TAG,),
    )


def ensure_guard_vm(cloud: Cloud, settings: GuardVmSettings) -> tuple[Vm, bool]:
    """The guard VM, created or adopted (idempotent); True when it was created now. A VM of that name without
    the cluster's guard labels is someone else's and is never touched."""
    vm = cloud.vms.get_vm(settings.zone, settings.name)
    if vm is not None:
        if not (owned_by(vm.labels, settings.cluster) and is_guard(vm.labels)):
            raise CloudError(
                f"VM {settings.name} in {settings.zone} exists but is not this cluster's guard "
                f"(no labels {CLUSTER_LABEL}={settings.cluster}, {ROLE_LABEL}={GUARD_ROLE})",
                "tpuops never touches resources it did not create: delete or rename that VM",
            )
        if vm.state in STOPPED_STATES:  # stopped by hand: started again, as `guard up` promises
            return cloud.vms.start_vm(settings.zone, settings.name), False
        return vm, False
    return cloud.vms.create_vm(guard_request(settings)), True


class GuardVmKind(VmKindBase):
    kind: Kind = "guard_vm"

    def depends_on(self, spec: Spec) -> tuple[Kind, ...]:
        return ()

    def observe(self, job: Job, known: Known) -> Found:
        record = job.ledger.recorded("guard_vm")
        if record is None:
            return Found()
        vm = job.cloud.vms.get_vm(record.zone or "", record.name)
        if vm is None:
            return Found()
        owned = owned_by(vm.labels, job.spec.name) and is_guard(vm.labels)
        return Found(ObservedResource("guard_vm", vm.name, vm.state, owned, vm.zone))

    def ensure(self, job: Job, action: Action, known: Known) -> Found:
        if action.verb != "keep":  # the startup script needs the bundle `guard up` stages first
            raise CloudError(f"the guard VM {action.name} is not there", f"run `tpuops guard up {job.spec.name}`")
        return Found(ObservedResource("guard_vm", action.name, None, True, action.zone))

    def is_mine(self, labels: Mapping[str, str]) -> bool:
        return is_guard(labels)

    def row(self, vm: Vm) -> ResourceStatus:
        return guard_row(vm)


def guard_row(vm: Vm) -> ResourceStatus:
    """The guard VM as `status` shows it."""
    addresses = f"internal {vm.internal_ip or '-'}, external {vm.external_ip or '-'}"
    return ResourceStatus("guard_vm", vm.name, vm.zone, vm.state, f"{vm.machine_type or '-'}, {addresses}")
