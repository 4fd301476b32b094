"""Client VMs and project facts through google.cloud.compute_v1 (REST).

Operations are waited on with the public ZoneOperationsClient: `ExtendedOperation.result()` builds its
own operations client and would ignore a custom endpoint.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpuops.cloud.base import HostKey, Vm, VmRequest, has_labels
from tpuops.cloud.gcp.errors import is_capacity_message, none_if_missing, refusal
from tpuops.cloud.gcp.waiting import Timing
from tpuops.errors import CapacityError, CloudError, TransientError

API = "compute"
TRANSIENT_OPERATION_CODES = frozenset({429, 500, 502, 503, 504})
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


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
        expression = label_filter(labels)
        if zones:
            found = [
                to_vm(instance, zone)
                for zone in zones
                for instance in self.timing.call(
                    lambda zone=zone: list(
                        self.instances.list(request={"project": self.project, "zone": zone, "filter": expression})
                    ),
                    f"list VMs in {zone}",
                    API,
                )
            ]
        else:
            found = self._aggregated(expression)
        return [vm for vm in found if has_labels(vm.labels, labels)]  # also when an endpoint ignores the filter

    def _aggregated(self, expression: str) -> list[Vm]:
        what = "list VMs in every zone"
        request = {"project": self.project, "filter": expression}
        pages = self.timing.call(lambda: list(self.instances.aggregated_list(request=request).pages), what, API)
        unreachable = sorted({scope for page in pages for scope in page.unreachables})
        if unreachable:
            raise CloudError(
                f"{what}: the API could not reach {', '.join(unreachable)}",
                "try again later, or search named zones with --zone",
            )
        return [
            to_vm(instance, scope.rsplit("/", 1)[-1])
            for page in pages
            for scope, scoped in page.items.items()
            for instance in scoped.instances
        ]

    def create_vm(self, request: VmRequest) -> Vm:
        what = f"create VM {request.name} in {request.zone}"
        from google.api_core import exceptions as gexc

        def create_and_wait() -> None:
            try:
                operation = self.timing.call(
                    lambda: self.instances.insert_unary(
                        project=self.project, zone=request.zone, instance_resource=instance_message(request)
                    ),
                    what,
                    API,
                )
            except CloudError as err:
                if isinstance(err.__cause__, gexc.Conflict):
                    return  # a retried insert whose first attempt got through
                raise
            self._wait(operation, request.zone, what)

        self.timing.retry_transient(create_and_wait)  # again when the operation itself failed transiently
        vm = self.get_vm(request.zone, request.name)
        if vm is None:
            raise CloudError(f"{what}: the operation finished but the VM is not there", "rerun `tpuops up`")
        return vm

    def start_vm(self, zone: str, name: str) -> Vm:
        what = f"start VM {name}"
        operation = self.timing.call(
            lambda: self.instances.start_unary(project=self.project, zone=zone, instance=name), what, API)
        self._wait(operation, zone, what)
        vm = self.get_vm(zone, name)
        if vm is None:
            raise CloudError(f"{what}: the VM is gone", "rerun the command")
        return vm

    def delete_vm(self, zone: str, name: str) -> None:

        what = f"delete VM {name}"

        call = none_if_missing(lambda: self.instances.delete_unary(project=self.project, zone=zone, instance=name))

        operation = self.timing.call(call, what, API)
        if operation is not None:
            self._wait(operation, zone, what)

    def host_keys(self, zone: str, name: str) -> list[HostKey]:

        request = {"project": self.project, "zone": zone, "instance": name, "query_path": "hostkeys/"}
        # None: guest attributes not enabled or not yet written
        call = none_if_missing(lambda: self.instances.get_guest_attributes(request=request))

        attributes = self.timing.call(call, f"read host keys of VM {name}", API)
        if attributes is None:
            return []
        return [
            HostKey(worker=0, key_type=item.key, key=item.value.strip())
            for item in attributes.query_value.items
            if item.namespace == "hostkeys" and item.value
        ]

    def _wait(self, operation: Any, zone: str, what: str) -> None:
        name = operation.name

        def done() -> Any:
            current = self.operations.wait(project=self.project, zone=zone, operation=name)
            return current if current.status.name == "DONE" else None

        finished = self.timing.poll_until(lambda: self.timing.call(done, f"{what} (waiting)", API,
                                                                   server_wait=OPERATION_WAIT_S), what)
        raise_operation_error(finished, what)


OPERATION_WAIT_S = 120.0  # ZoneOperations.wait returns by then at the latest, done or not


def raise_operation_error(operation: Any, what: str) -> None:
    errors = list(operation.error.errors) if operation.error else []
    if not errors:
        return
    message = "; ".join(f"{error.code}: {error.message}" for error in errors)
    refused = refusal(what, message)
    if refused is not None:
        raise refused
    if any(is_capacity_message(f"{error.code} {error.message}") for error in errors):
        raise CapacityError(f"{what}: no capacity: {message}", "try another zone")
    if operation.http_error_status_code in TRANSIENT_OPERATION_CODES:
        raise TransientError(f"{what}: {message}")
    raise CloudError(f"{what}: {message}")


def label_filter(labels: Mapping[str, str]) -> str:
    """Compute's filter syntax: `labels.KEY = "VALUE"`, each term in parentheses when there are several."""
    terms = [f'labels.{key} = "{value}"' for key, value in sorted(labels.items())]
    return terms[0] if len(terms) == 1 else " ".join(f"({term})" for term in terms)


def instance_message(request: VmRequest) -> Any:
    from google.cloud import compute_v1

    zone = request.zone
    interface = compute_v1.NetworkInterface(
        network=f"global/networks/{request.network}",
        access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")],
    )
    if request.subnetwork:
        interface.subnetwork = f"regions/{zone.rsplit('-', 1)[0]}/subnetworks/{request.subnetwork}"
    metadata = [compute_v1.Items(key="enable-guest-attributes", value="TRUE")]
    if request.ssh_keys:
        metadata.append(compute_v1.Items(key="ssh-keys", value=request.ssh_keys))
    if request.startup_script:
        metadata.append(compute_v1.Items(key="startup-script", value=request.startup_script))
    instance = compute_v1.Instance(
        name=request.name,
        machine_type=f"zones/{zone}/machineTypes/{request.machine_type}",
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=f"projects/{request.image_project}/global/images/family/{request.image_family}",
                    disk_size_gb=request.disk_gb,
                ),
            )
        ],
        network_interfaces=[interface],
        metadata=compute_v1.Metadata(items=metadata),
        labels=dict(request.labels),
        # The VM talks to the TPU and the bucket as its service account; what it may do is decided by that
        # account's roles, not by narrower scopes.
        service_accounts=[
            compute_v1.ServiceAccount(email=request.service_account or "default", scopes=[CLOUD_PLATFORM_SCOPE])
        ],
    )
    if request.tags:
        instance.tags = compute_v1.Tags(items=list(request.tags))
    return instance


def to_vm(instance: Any, zone: str) -> Vm:
    interfaces = list(instance.network_interfaces)
    first = interfaces[0] if interfaces else None
    external = None
    if first is not None:
        external = next((config.nat_i_p for config in first.access_configs if config.nat_i_p), None)
    return Vm(
        name=instance.name,
        zone=zone,
        state=instance.status,
        internal_ip=first.network_i_p if first is not None else None,
        external_ip=external,
        labels=dict(instance.labels),
        machine_type=instance.machine_type.rsplit("/", 1)[-1] or None,
    )
