"""compute_v1 messages for TPUs on Compute Engine, and Compute Engine's answers read back into TpuHost/TpuSlice.

What each field says and where it was read: docs/compute-engine-tpus.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpuops.cloud.compute_tpu import (
    ACCELERATOR_LABEL,
    STOPPED,
    Provisioning,
    TpuHost,
    TpuSlice,
    TpuVmRequest,
    policy_name,
    slice_state,
    template_name,
)
from tpuops.cloud.gcp.compute_common import addresses, boot_disk, metadata, network_interface, service_accounts
from tpuops.spec.pools import region_of

RANK_KEY = "agent-worker-number"
PROVISIONING_MODELS: dict[Provisioning, str] = {
    "standard": "STANDARD", "spot": "SPOT", "flex-start": "FLEX_START", "reservation-bound": "RESERVATION_BOUND",
}
PROVISIONING_OF = {model: name for name, model in PROVISIONING_MODELS.items()}
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


def scheduling(request: TpuVmRequest) -> Any:
    """TPU VMs cannot live-migrate: TERMINATE on host maintenance. A Spot VM stops when reclaimed (it reads
    TERMINATED until deleted, so a preemption stays visible); flex-start and reservation-bound VMs are deleted at
    the end of their run time or reservation."""
    from google.cloud import compute_v1

    message = compute_v1.Scheduling(on_host_maintenance="TERMINATE",
                                    provisioning_model=PROVISIONING_MODELS[request.provisioning])
    if request.provisioning == "spot":
        message.instance_termination_action = "STOP"
    elif request.provisioning in ("flex-start", "reservation-bound"):
        message.instance_termination_action = "DELETE"
    if request.provisioning == "flex-start" and request.max_run_seconds:
        message.max_run_duration = compute_v1.Duration(seconds=request.max_run_seconds)
    return message


def _common(request: TpuVmRequest, disk_type: str) -> dict[str, Any]:
    """The parts an instance and an instance template share (those of any VM: compute_common.py)."""
    from google.cloud import compute_v1

    fields: dict[str, Any] = {
        "disks": [boot_disk(request.image_project, request.image_family, request.boot_disk_gb, disk_type)],
        "network_interfaces": [network_interface(request.network, request.subnetwork, request.zone)],
        "metadata": metadata(request.ssh_keys),
        "labels": {**request.labels, ACCELERATOR_LABEL: request.accelerator_type},
        "service_accounts": service_accounts(request.service_account),
        "scheduling": scheduling(request),
    }
    if request.provisioning == "reservation-bound" and request.reservation:
        fields["reservation_affinity"] = compute_v1.ReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[request.reservation])
    return fields


def instance_message(request: TpuVmRequest) -> Any:
    from google.cloud import compute_v1

    zone = request.zone
    return compute_v1.Instance(name=request.name, machine_type=f"zones/{zone}/machineTypes/{request.machine_type}",
                               **_common(request, f"zones/{zone}/diskTypes/{request.boot_disk_type}"))


def template_message(request: TpuVmRequest) -> Any:
    """A global template: machine and disk types by bare name (a template is not in a zone)."""
    from google.cloud import compute_v1

    properties = compute_v1.InstanceProperties(machine_type=request.machine_type,
                                               **_common(request, request.boot_disk_type))
    return compute_v1.InstanceTemplate(name=template_name(request.name), properties=properties)


def policy_message(request: TpuVmRequest) -> Any:
    from google.cloud import compute_v1

    workload = compute_v1.ResourcePolicyWorkloadPolicy(type_="HIGH_THROUGHPUT",
                                                       accelerator_topology=request.topology or "")
    return compute_v1.ResourcePolicy(name=policy_name(request.name), region=region_of(request.zone),
                                     workload_policy=workload)


def group_message(request: TpuVmRequest, project: str) -> Any:
    """All VMs at once (BULK: gcloud sets it, the REST API does not by default) and no repair of a single VM: a
    slice is whole or it is re-created whole."""
    from google.cloud import compute_v1

    region = region_of(request.zone)
    return compute_v1.InstanceGroupManager(
        name=request.name,
        base_instance_name=request.name,
        instance_template=f"projects/{project}/global/instanceTemplates/{template_name(request.name)}",
        target_size=request.hosts,
        target_size_policy=compute_v1.InstanceGroupManagerTargetSizePolicy(mode="BULK"),
        instance_lifecycle_policy=compute_v1.InstanceGroupManagerInstanceLifecyclePolicy(
            default_action_on_failure="DO_NOTHING"),
        resource_policies=compute_v1.InstanceGroupManagerResourcePolicies(
            workload_policy=f"projects/{project}/regions/{region}/resourcePolicies/{policy_name(request.name)}"),
    )


# ------------------------------------------------------------------------------------------------ reading


def metadata_of(instance: Any) -> dict[str, str]:
    return {item.key: item.value for item in instance.metadata.items}


def to_host(instance: Any, single: bool) -> TpuHost:
    """Its rank from `agent-worker-number`; a single host without it is rank 0, a slice's host without it has no
    rank yet (-1)."""
    raw = metadata_of(instance).get(RANK_KEY, "")
    rank = int(raw) if raw.strip().isdigit() else (0 if single else -1)
    internal, external = addresses(instance)
    spot = instance.scheduling.provisioning_model == "SPOT"
    return TpuHost(rank=rank, instance=instance.name, internal_ip=internal or "", external_ip=external,
                   status=instance.status, preempted=spot and instance.status in STOPPED)


def to_slice(name: str, zone: str, hosts: Sequence[TpuHost], expected: int, labels: Mapping[str, str],
             machine_type: str, topology_state: str | None = None, provisioning_model: str = "") -> TpuSlice:
    ordered = tuple(sorted(hosts, key=lambda host: host.rank))
    state, detail = slice_state(ordered, expected, topology_state)
    return TpuSlice(name=name, zone=zone, machine_type=machine_type.rsplit("/", 1)[-1], state=state, hosts=ordered,
                    expected_hosts=expected, labels=dict(labels),
                    provisioning=PROVISIONING_OF.get(provisioning_model, "standard"),
                    topology_state=topology_state, detail=detail)
