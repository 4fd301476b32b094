"""What the two Compute Engine adapters share: plain VMs (compute.py) and TPUs made as VMs (compute_tpus.py).

Inserting (an earlier attempt's 409 is success) and deleting with the wait on the operation, finding instances by
label in named zones or every zone, the host keys a VM publishes in its guest attributes, and the parts of an
instance message both build (network, boot disk, metadata, service account).

Operations are waited on with the public Zone/Region/GlobalOperationsClient: `ExtendedOperation.result()` builds
its own operations client and would ignore a custom endpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpuops.cloud.base import HostKey
from tpuops.cloud.gcp.errors import none_if_missing, operation_failure
from tpuops.cloud.gcp.waiting import Timing
from tpuops.errors import CloudError
from tpuops.spec.pools import region_of

API = "compute"
OPERATION_WAIT_S = 120.0  # Compute's operations.wait returns by then at the latest, done or not
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
WaitOnce = Callable[[str], Any]  # one server-side wait on the operation of that name: the operation as it is then


def insert_and_wait(timing: Timing, insert: Callable[[], Any], wait_once: WaitOnce, what: str) -> None:
    """Insert and wait for the operation; all again when the operation failed transiently. A 409 (already exists)
    is an earlier attempt that got through after all."""
    from google.api_core import exceptions as gexc

    def attempt() -> None:
        try:
            operation = timing.call(insert, what, API)
        except CloudError as err:
            if isinstance(err.__cause__, gexc.Conflict):
                return
            raise
        wait_done(timing, operation, wait_once, what)

    timing.retry_transient(attempt)


def delete_and_wait(timing: Timing, delete: Callable[[], Any], wait_once: WaitOnce, what: str) -> None:
    """Delete and wait for the operation; something already gone is no error."""
    operation = timing.call(none_if_missing(delete), what, API)
    if operation is not None:
        wait_done(timing, operation, wait_once, what)


def wait_done(timing: Timing, operation: Any, wait_once: WaitOnce, what: str) -> None:
    """Wait until the operation is DONE (each wait answers by OPERATION_WAIT_S, done or not); its errors raised."""
    name = operation.name

    def done() -> Any:
        current = wait_once(name)
        return current if current.status.name == "DONE" else None

    finished = timing.poll_until(lambda: timing.call(done, f"{what} (waiting)", API, server_wait=OPERATION_WAIT_S),
                                 what)
    errors = list(finished.error.errors) if finished.error else []
    if errors:
        raise operation_failure(what, ((error.code, error.message) for error in errors),
                                finished.http_error_status_code)


def label_filter(labels: Mapping[str, str]) -> str:
    """Compute's filter syntax: `labels.KEY = "VALUE"`, each term in parentheses when there are several."""
    terms = [f'labels.{key} = "{value}"' for key, value in sorted(labels.items())]
    return terms[0] if len(terms) == 1 else " ".join(f"({term})" for term in terms)


def labelled_instances(timing: Timing, instances: Any, project: str, labels: Mapping[str, str],
                       zones: Sequence[str] = ()) -> list[tuple[str, Any]]:
    """(zone, instance) of the instances the API says carry `labels`: in `zones`, or in every zone at once with
    aggregatedList (an unreachable zone is an error, not "none there"). Callers check the labels again, for an
    endpoint that ignores the filter."""
    expression = label_filter(labels)
    if zones:
        return [(zone, instance) for zone in zones for instance in timing.call(
            lambda zone=zone: list(instances.list(request={"project": project, "zone": zone, "filter": expression})),
            f"list VMs in {zone}", API)]
    what = "list VMs in every zone"
    request = {"project": project, "filter": expression}
    pages = timing.call(lambda: list(instances.aggregated_list(request=request).pages), what, API)
    unreachable = sorted({scope for page in pages for scope in page.unreachables})
    if unreachable:
        raise CloudError(f"{what}: the API could not reach {', '.join(unreachable)}",
                         "try again later, or search named zones with --zone")
    return [(scope.rsplit("/", 1)[-1], instance) for page in pages for scope, scoped in page.items.items()
            for instance in scoped.instances]


def guest_host_keys(timing: Timing, instances: Any, project: str, zone: str, name: str,
                    worker: int = 0) -> list[HostKey]:
    """The SSH host keys VM `name` published in its guest attributes (`hostkeys/`), as `worker`'s; none when guest
    attributes are off or not written yet."""
    request = {"project": project, "zone": zone, "instance": name, "query_path": "hostkeys/"}
    attributes = timing.call(none_if_missing(lambda: instances.get_guest_attributes(request=request)),
                             f"read host keys of VM {name}", API)
    if attributes is None:
        return []
    return [HostKey(worker=worker, key_type=item.key, key=item.value.strip())
            for item in attributes.query_value.items if item.namespace == "hostkeys" and item.value]


def addresses(instance: Any) -> tuple[str | None, str | None]:
    """The internal and external address of an instance's first network interface."""
    interfaces = list(instance.network_interfaces)
    if not interfaces:
        return None, None
    first = interfaces[0]
    return first.network_i_p, next((config.nat_i_p for config in first.access_configs if config.nat_i_p), None)


# ------------------------------------------------------------------------------------------ instance messages


def network_interface(network: str, subnetwork: str | None, zone: str) -> Any:
    """On `network` (the subnetwork in the zone's region), with an external address."""
    from google.cloud import compute_v1

    interface = compute_v1.NetworkInterface(
        network=f"global/networks/{network}",
        access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")],
    )
    if subnetwork:
        interface.subnetwork = f"regions/{region_of(zone)}/subnetworks/{subnetwork}"
    return interface


def boot_disk(image_project: str, image_family: str, size_gb: int, disk_type: str | None = None) -> Any:
    """A boot disk from the family's newest image, deleted with the VM."""
    from google.cloud import compute_v1

    params = compute_v1.AttachedDiskInitializeParams(
        source_image=f"projects/{image_project}/global/images/family/{image_family}", disk_size_gb=size_gb)
    if disk_type:
        params.disk_type = disk_type
    return compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=params)


def metadata(ssh_keys: str | None, startup_script: str | None = None) -> Any:
    """Guest attributes on (the VM publishes its SSH host keys there, for tpuops to pin), the SSH keys, the
    startup script."""
    from google.cloud import compute_v1

    items = [compute_v1.Items(key="enable-guest-attributes", value="TRUE")]
    if ssh_keys:
        items.append(compute_v1.Items(key="ssh-keys", value=ssh_keys))
    if startup_script:
        items.append(compute_v1.Items(key="startup-script", value=startup_script))
    return compute_v1.Metadata(items=items)


def service_accounts(email: str | None) -> list[Any]:
    """The VM acts as this account (None: the project's Compute default); what it may do is decided by the
    account's roles, not by narrower scopes."""
    from google.cloud import compute_v1

    return [compute_v1.ServiceAccount(email=email or "default", scopes=[CLOUD_PLATFORM_SCOPE])]
