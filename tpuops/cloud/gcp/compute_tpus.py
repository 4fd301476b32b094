"""ComputeTpuApi over compute_v1 (REST): single-host TPU instances, and multi-host slices made of a regional workload
policy, a global instance template and a zonal managed instance group (see cloud/compute_tpu.py).

Inserts, deletes and the waits on their operations, listing by label and host keys go through compute_common.py, as
for plain VMs; the messages are built in compute_tpu_messages.py.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpuops.cloud.base import HostKey, has_labels
from tpuops.cloud.compute_tpu import TpuSlice, TpuVmRequest, is_compute_tpu, policy_name, template_name
from tpuops.cloud.gcp.clients import ComputeTpuClients
from tpuops.cloud.gcp.compute_common import (
    API,
    WaitOnce,
    delete_and_wait,
    guest_host_keys,
    insert_and_wait,
    labelled_instances,
)
from tpuops.cloud.gcp.compute_tpu_messages import (
    group_message,
    instance_message,
    policy_message,
    template_message,
    to_host,
    to_slice,
)
from tpuops.cloud.gcp.errors import none_if_missing, operation_failure
from tpuops.cloud.gcp.waiting import Timing
from tpuops.errors import CloudError, TpuopsError
from tpuops.spec.pools import region_of


class ComputeTpusApi:
    def __init__(self, make_clients: Callable[[], ComputeTpuClients], project: str, timing: Timing) -> None:
        self._make_clients = make_clients
        self.project = project
        self.timing = timing

    @functools.cached_property
    def c(self) -> ComputeTpuClients:
        return self._make_clients()  # compute_v1 costs over a second to import: only when used

    # ------------------------------------------------------------------------------------------- create
    def create_tpu_vm(self, request: TpuVmRequest) -> TpuSlice:
        what = f"create TPU {request.name} ({request.machine_type} x{request.hosts}) in {request.zone}"
        try:
            if request.multi_host:
                self._create_slice(request, what)
            else:
                self._insert(lambda: self.c.instances.insert_unary(
                    project=self.project, zone=request.zone, instance_resource=instance_message(request)),
                    "zone", request.zone, what)
            return self.timing.poll_until(lambda: self._usable(request, what), what)
        except TpuopsError:
            with contextlib.suppress(TpuopsError):  # the refusal is what the user needs, not a failed clean-up's
                self.delete_tpu_vm(request.zone, request.name)  # a refused create leaves nothing billing
            raise

    def _create_slice(self, request: TpuVmRequest, what: str) -> None:
        region = region_of(request.zone)
        self._insert(lambda: self.c.policies.insert_unary(
            project=self.project, region=region, resource_policy_resource=policy_message(request)),
            "region", region, f"{what}: workload policy")
        self._insert(lambda: self.c.templates.insert_unary(
            project=self.project, instance_template_resource=template_message(request)),
            "global", "", f"{what}: instance template")
        group = group_message(request, self.project)
        self._insert(lambda: self.c.groups.insert_unary(
            project=self.project, zone=request.zone, instance_group_manager_resource=group),
            "zone", request.zone, f"{what}: instance group")

    def _insert(self, insert: Callable[[], Any], scope: str, where: str, what: str) -> None:
        insert_and_wait(self.timing, insert, self._wait_in(scope, where), what)

    def _usable(self, request: TpuVmRequest, what: str) -> TpuSlice | None:
        """The slice once every host runs with its rank; a failed creation attempt of the group raises. A poll
        lists the group's VMs once, for both."""
        managed = None
        if request.multi_host:
            managed = self._managed(request.zone, request.name)
            raise_failed_attempt(managed, what)
        found = self._read(request.zone, request.name, managed)
        if found is None:
            raise CloudError(f"{what}: it is gone while being created", "rerun `tpuops up`")
        if found.state == "READY":
            return found
        if found.state == "CREATING":
            return None
        raise CloudError(f"{what}: it is {found.state} ({found.detail})", "run `tpuops down` then `tpuops up`")

    # ---------------------------------------------------------------------------------------------- read
    def get_tpu_vm(self, zone: str, name: str) -> TpuSlice | None:
        return self._read(zone, name)

    def _read(self, zone: str, name: str, managed: list[Any] | None = None) -> TpuSlice | None:
        """The slice as it is now, each thing read once (nothing kept between calls: the server's state changes);
        `managed`: the group's VMs, when this call listed them already."""
        group = self._get(lambda: self.c.groups.get(project=self.project, zone=zone, instance_group_manager=name),
                          f"get instance group {name}")
        if group is not None:
            return self._group_slice(zone, group, managed)
        instance = self._get_instance(zone, name)
        return None if instance is None else to_slice(name, zone, [to_host(instance, single=True)], 1,
                                                      dict(instance.labels), instance.machine_type,
                                                      provisioning_model=instance.scheduling.provisioning_model)

    def _group_slice(self, zone: str, group: Any, managed: list[Any] | None = None) -> TpuSlice:
        """The group's VMs in one listing. Their labels, machine type and scheduling are their template's (the group
        made them from it), so the template is read only while the group has none."""
        listed = self._managed(zone, group.name) if managed is None else managed
        names = [m.instance.rsplit("/", 1)[-1] for m in listed if m.instance]
        instances = self._group_instances(zone, group, names)
        if instances:
            made = instances[0]
            labels, machine_type, model = dict(made.labels), made.machine_type, made.scheduling.provisioning_model
        else:
            properties = self._template_properties(group)
            labels = dict(properties.labels) if properties else {}
            machine_type = properties.machine_type if properties else ""
            model = properties.scheduling.provisioning_model if properties else ""
        topologies = list(group.status.applied_accelerator_topologies) if group.status else []
        return to_slice(group.name, zone, [to_host(i, single=False) for i in instances], group.target_size,
                        labels, machine_type, topology_state=topologies[0].state if topologies else None,
                        provisioning_model=model)

    def _group_instances(self, zone: str, group: Any, names: list[str]) -> list[Any]:
        """The VMs `names`, in that order: one listing of the zone's VMs named after the group (it names them
        BASE-xxxx), then any it did not return (named otherwise, or gone meanwhile) asked for one by one."""
        if not names:
            return []
        base = group.base_instance_name or group.name
        request = {"project": self.project, "zone": zone, "filter": f'name eq "{base}-.+"'}
        listed = self.timing.call(lambda: list(self.c.instances.list(request=request)),
                                  f"list the VMs of group {group.name}", API)
        by_name = {instance.name: instance for instance in listed}
        found = [by_name.get(name) or self._get_instance(zone, name) for name in names]
        return [instance for instance in found if instance is not None]

    def _template_properties(self, group: Any) -> Any:
        template = self._get(lambda: self.c.templates.get(
            project=self.project, instance_template=group.instance_template.rsplit("/", 1)[-1]),
            f"get instance template of {group.name}")
        return template.properties if template is not None else None

    def _managed(self, zone: str, name: str) -> list[Any]:
        return self.timing.call(lambda: list(self.c.groups.list_managed_instances(
            project=self.project, zone=zone, instance_group_manager=name)), f"list the VMs of group {name}", API)

    def _get_instance(self, zone: str, name: str) -> Any:
        return self._get(lambda: self.c.instances.get(project=self.project, zone=zone, instance=name),
                         f"get VM {name}")

    def host_keys(self, zone: str, name: str) -> list[HostKey]:
        """Each host's keys: the slice read once (its hosts' names and ranks), then one guest-attribute read a host."""
        found = self._read(zone, name)
        return [key for host in (found.hosts if found else ())
                for key in guest_host_keys(self.timing, self.c.instances, self.project, zone, host.instance, host.rank)]

    def find_tpu_vms(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[TpuSlice]:
        """By the instances' labels (a group's VMs carry its template's), plus groups whose VMs are not made yet."""
        found: dict[tuple[str, str], None] = {}
        for zone, instance in labelled_instances(self.timing, self.c.instances, self.project, labels, zones):
            if not is_compute_tpu(instance.labels):
                continue  # a plain VM of the same cluster (a client or guard VM)
            creator = next((i.value for i in instance.metadata.items if i.key == "created-by"), "")
            found[(zone, creator.rsplit("/", 1)[-1] if creator else instance.name)] = None
        listed: dict[tuple[str, str], Any] = {}
        for zone in zones:
            groups = self.timing.call(lambda zone=zone: list(self.c.groups.list(project=self.project, zone=zone)),
                                      f"list instance groups in {zone}", API)
            listed.update({(zone, group.name): group for group in groups})
        found.update(dict.fromkeys(listed))
        slices = [self._group_slice(zone, listed[(zone, name)]) if (zone, name) in listed
                  else self.get_tpu_vm(zone, name) for zone, name in found]  # a listed group is not asked for again
        return [s for s in slices if s is not None and has_labels(s.labels, labels)]

    # -------------------------------------------------------------------------------------------- delete
    def delete_tpu_vm(self, zone: str, name: str) -> None:
        """Reverse order of creation: the group (its VMs with it), or the one instance; then the template and the
        policy, which an interrupted create may have left without a group."""
        project, region = self.project, region_of(zone)
        steps: list[tuple[Callable[[], Any], str, str, str]] = [
            (lambda: self.c.groups.delete_unary(project=project, zone=zone, instance_group_manager=name),
             "zone", zone, f"delete instance group {name}"),
            (lambda: self.c.instances.delete_unary(project=project, zone=zone, instance=name),
             "zone", zone, f"delete VM {name}"),
            (lambda: self.c.templates.delete_unary(project=project, instance_template=template_name(name)),
             "global", "", f"delete instance template {template_name(name)}"),
            (lambda: self.c.policies.delete_unary(project=project, region=region, resource_policy=policy_name(name)),
             "region", region, f"delete workload policy {policy_name(name)}"),
        ]
        for delete, scope, where, what in steps:
            delete_and_wait(self.timing, delete, self._wait_in(scope, where), what)

    # ---------------------------------------------------------------------------------------------- misc
    def _get(self, call: Callable[[], Any], what: str) -> Any:
        return self.timing.call(none_if_missing(call), what, API)

    def _wait_in(self, scope: str, where: str) -> WaitOnce:
        """One wait on an operation of `scope` (zone, region or global) in `where`."""
        project, c = self.project, self.c
        if scope == "zone":
            return lambda operation: c.zone_operations.wait(project=project, zone=where, operation=operation)
        if scope == "region":
            return lambda operation: c.region_operations.wait(project=project, region=where, operation=operation)
        return lambda operation: c.global_operations.wait(project=project, operation=operation)


def raise_failed_attempt(managed: Sequence[Any], what: str) -> None:
    """A BULK group waits for all its VMs at once; its last attempt's error says why it does not get them."""
    for vm in managed:
        errors = list(vm.last_attempt.errors.errors) if vm.last_attempt else []
        if errors:
            raise operation_failure(what, ((error.code, error.message) for error in errors))
