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
        """The slice once every host runs with its rank; a failed creation attempt of the group raises."""
        if request.multi_host:
            self._raise_failed_attempt(request.zone, request.name, what)
        found = self.get_tpu_vm(request.zone, request.name)
        if found is None:
            raise CloudError(f"{what}: it is gone while being created", "rerun `tpuops up`")
        if found.state == "READY":
            return found
        if found.state == "CREATING":
            return None
        raise CloudError(f"{what}: it is {found.state} ({found.detail})", "run `tpuops down` then `tpuops up`")

    def _raise_failed_attempt(self, zone: str, name: str, what: str) -> None:
        """A BULK group waits for all its VMs at once; its last attempt's error says why it does not get them."""
        for managed in self._managed(zone, name):
            errors = list(managed.last_attempt.errors.errors) if managed.last_attempt else []
            if errors:
                raise operation_failure(what, ((error.code, error.message) for error in errors))

    # ---------------------------------------------------------------------------------------------- read
    def get_tpu_vm(self, zone: str, name: str) -> TpuSlice | None:
        group = self._get(lambda: self.c.groups.get(project=self.project, zone=zone, instance_group_manager=name),
                          f"get instance group {name}")
        if group is not None:
            return self._group_slice(zone, group)
        instance = self._get_instance(zone, name)
        return None if instance is None else to_slice(name, zone, [to_host(instance, single=True)], 1,
                                                      dict(instance.labels), instance.machine_type,
                                                      provisioning_model=instance.scheduling.provisioning_model)

    def _group_slice(self, zone: str, group: Any) -> TpuSlice:
        names = [m.instance.rsplit("/", 1)[-1] for m in self._managed(zone, group.name) if m.instance]
        instances = [found for found in (self._get_instance(zone, n) for n in names) if found is not None]
        template = self._get(lambda: self.c.templates.get(
            project=self.project, instance_template=group.instance_template.rsplit("/", 1)[-1]),
            f"get instance template of {group.name}")
        properties = template.properties if template is not None else None
        topologies = list(group.status.applied_accelerator_topologies) if group.status else []
        return to_slice(group.name, zone, [to_host(i, single=False) for i in instances], group.target_size,
                        dict(properties.labels) if properties else {},
                        properties.machine_type if properties else "",
                        topology_state=topologies[0].state if topologies else None,
                        provisioning_model=properties.scheduling.provisioning_model if properties else "")

    def _managed(self, zone: str, name: str) -> list[Any]:
        return self.timing.call(lambda: list(self.c.groups.list_managed_instances(
            project=self.project, zone=zone, instance_group_manager=name)), f"list the VMs of group {name}", API)

    def _get_instance(self, zone: str, name: str) -> Any:
        return self._get(lambda: self.c.instances.get(project=self.project, zone=zone, instance=name),
                         f"get VM {name}")

    def host_keys(self, zone: str, name: str) -> list[HostKey]:
        found = self.get_tpu_vm(zone, name)
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
        for zone in zones:
            groups = self.timing.call(lambda zone=zone: list(self.c.groups.list(project=self.project, zone=zone)),
                                      f"list instance groups in {zone}", API)
            found.update({(zone, group.name): None for group in groups})
        slices = [self.get_tpu_vm(zone, name) for zone, name in found]
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
