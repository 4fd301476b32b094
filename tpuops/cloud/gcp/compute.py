"""Client VMs and project facts through google.cloud.compute_v1 (REST); the calls and message parts it shares
with the Compute Engine TPU adapter are in compute_common.py."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpuops.cloud.base import HostKey, Vm, VmRequest, has_labels
from tpuops.cloud.gcp.compute_common import (
    API,
    WaitOnce,
    addresses,
    boot_disk,
    delete_and_wait,
    guest_host_keys,
    insert_and_wait,
    labelled_instances,
    metadata,
    network_interface,
    service_accounts,
    wait_done,
)
from tpuops.cloud.gcp.errors import none_if_missing
from tpuops.cloud.gcp.waiting import Timing
from tpuops.errors import CloudError

BOOTING = frozenset({"PROVISIONING", "STAGING"})  # a VM's statuses before RUNNING


class ComputeApi:
    """VmApi and ProjectApi over compute_v1's InstancesClient, ZoneOperationsClient and ProjectsClient."""

    def __init__(self, make_clients: Callable[[], tuple[Any, Any, Any]], project: str, timing: Timing) -> None:
        self._make_clients = make_clients
        self.project = project
        self.timing = timing

    @functools.cached_property
    def _clients(self) -> tuple[Any, Any, Any]:
        return self._make_clients()  # built on first use: compute_v1 alone costs over a second to import

    @property
    def instances(self) -> Any:
        return self._clients[0]

    @property
    def operations(self) -> Any:
        return self._clients[1]

    @property
    def projects(self) -> Any:
        return self._clients[2]

    def default_service_account(self) -> str:
        info = self.timing.call(lambda: self.projects.get(project=self.project), "read project", API)
        if not info.default_service_account:
            raise CloudError(
                f"project {self.project} has no Compute default service account",
                "set tpu.service_account in the spec",
            )
        return info.default_service_account

    def get_vm(self, zone: str, name: str) -> Vm | None:
        call = none_if_missing(lambda: self.instances.get(project=self.project, zone=zone, instance=name))
        instance = self.timing.call(call, f"get VM {name}", API)
        return None if instance is None else to_vm(instance, zone)

    def list_vms(self, zone: str) -> list[Vm]:
        found = self.timing.call(lambda: list(self.instances.list(project=self.project, zone=zone)), "list VMs", API)
        return [to_vm(instance, zone) for instance in found]

    def find_vms(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[Vm]:
        """VMs carrying `labels`: the API filters; in every zone at once with aggregatedList."""
        found = [to_vm(instance, zone)
                 for zone, instance in labelled_instances(self.timing, self.instances, self.project, labels, zones)]
        return [vm for vm in found if has_labels(vm.labels, labels)]  # also when an endpoint ignores the filter

    def create_vm(self, request: VmRequest) -> Vm:
        what = f"create VM {request.name} in {request.zone}"
        insert_and_wait(self.timing, lambda: self.instances.insert_unary(
            project=self.project, zone=request.zone, instance_resource=instance_message(request)),
            self._wait_in(request.zone), what)
        return self.timing.poll_until(lambda: self._booted(request.zone, request.name, what), what)

    def _booted(self, zone: str, name: str, what: str) -> Vm | None:
        """The VM once it is past booting: after a retried insert's 409 nobody waited on the first attempt's
        operation, and until it is DONE the VM reads PROVISIONING or STAGING, without addresses."""
        vm = self.get_vm(zone, name)
        if vm is None:
            raise CloudError(f"{what}: the operation finished but the VM is not there", "rerun `tpuops up`")
        return None if vm.state in BOOTING else vm

    def start_vm(self, zone: str, name: str) -> Vm:
        what = f"start VM {name}"
        operation = self.timing.call(
            lambda: self.instances.start_unary(project=self.project, zone=zone, instance=name), what, API)
        wait_done(self.timing, operation, self._wait_in(zone), what)
        vm = self.get_vm(zone, name)
        if vm is None:
            raise CloudError(f"{what}: the VM is gone", "rerun the command")
        return vm

    def delete_vm(self, zone: str, name: str) -> None:
        delete_and_wait(self.timing, lambda: self.instances.delete_unary(project=self.project, zone=zone,
                                                                          instance=name),
                        self._wait_in(zone), f"delete VM {name}")

    def host_keys(self, zone: str, name: str) -> list[HostKey]:
        return guest_host_keys(self.timing, self.instances, self.project, zone, name)

    def _wait_in(self, zone: str) -> WaitOnce:
        return lambda operation: self.operations.wait(project=self.project, zone=zone, operation=operation)


def instance_message(request: VmRequest) -> Any:
    from google.cloud import compute_v1

    instance = compute_v1.Instance(
        name=request.name,
        machine_type=f"zones/{request.zone}/machineTypes/{request.machine_type}",
        disks=[boot_disk(request.image_project, request.image_family, request.disk_gb)],
        network_interfaces=[network_interface(request.network, request.subnetwork, request.zone)],
        metadata=metadata(request.ssh_keys, request.startup_script),
        labels=dict(request.labels),
        service_accounts=service_accounts(request.service_account),
    )
    if request.tags:
        instance.tags = compute_v1.Tags(items=list(request.tags))
    return instance


def to_vm(instance: Any, zone: str) -> Vm:
    internal, external = addresses(instance)
    return Vm(
        name=instance.name,
        zone=zone,
        state=instance.status,
        internal_ip=internal,
        external_ip=external,
        labels=dict(instance.labels),
        machine_type=instance.machine_type.rsplit("/", 1)[-1] or None,
    )
