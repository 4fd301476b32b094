"""What the two VM kinds (a legacy Node's client VM, the guard VM) do alike once a VM exists: delete it, describe
it, find the cluster's by label and read its labels. Each says which VMs are its own and how `status` shows one."""

from __future__ import annotations

from collections.abc import Mapping

from tpuops.cloud.base import Cloud, TpuMode, Vm
from tpuops.cloud.kinds.base import MISSING, Described, Doomed, Finding, ResourceStatus, owned_by
from tpuops.plan import Kind
from tpuops.state import ResourceRecord


class VmKindBase:
    kind: Kind
    zonal = True

    def is_mine(self, labels: Mapping[str, str]) -> bool:
        raise NotImplementedError

    def row(self, vm: Vm) -> ResourceStatus:
        raise NotImplementedError

    def delete(self, cloud: Cloud, mode: TpuMode, doomed: Doomed) -> None:
        cloud.vms.delete_vm(doomed.zone or "", doomed.name)

    def describe(self, cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> Described:
        zone = record.zone or ""
        vm = cloud.vms.get_vm(zone, record.name)
        if vm is None:
            return Described(ResourceStatus(self.kind, record.name, zone, MISSING))
        return Described(self.row(vm))

    def find(self, cloud: Cloud, mode: TpuMode, cluster: str, zone: str) -> list[Finding]:
        return [Finding(Doomed(self.kind, vm.name, zone)) for vm in cloud.vms.list_vms(zone)
                if owned_by(vm.labels, cluster) and self.is_mine(vm.labels)]

    def labels(self, cloud: Cloud, mode: TpuMode, name: str, zone: str) -> Mapping[str, str] | None:
        vm = cloud.vms.get_vm(zone, name)
        return None if vm is None else vm.labels
