"""What the resource kinds of a Compute Engine TPU (tpu.api: compute) will work with, ready for them: the request
a spec makes in a zone, and a slice seen as a TpuNode, so that `up`'s workers, `status`, `watch` and the guard
read it as they read a TPU VM (ranks as worker indexes, PREEMPTED and BROKEN as dead states).

Not registered as a kind yet: `up` refuses tpu.api: compute (ops/up.py) until the kinds are wired.
"""

from __future__ import annotations

from tpuops import catalog
from tpuops.cloud.base import TpuNode, Worker
from tpuops.cloud.compute_tpu import Provisioning, TpuSlice, TpuVmRequest
from tpuops.errors import SpecError
from tpuops.plan import tpu_name
from tpuops.spec import Spec


def provisioning(spec: Spec) -> Provisioning:
    tpu = spec.tpu
    if tpu.flex_start:
        return "flex-start"
    if tpu.reservation:
        return "reservation-bound"
    return "spot" if tpu.spot else "standard"


def compute_request(spec: Spec, zone: str, ssh_keys: str | None) -> TpuVmRequest:
    """The TPU the spec asks Compute Engine for in `zone` (the catalog's machine type, image, disk, topology)."""
    shape = catalog.load().compute_shape(spec.tpu.type)
    if shape is None:  # rules.py refuses such a spec before anything runs; this guards a caller that skipped it
        raise SpecError(f"{spec.tpu.type} has no Compute Engine shape in the catalog", "see `tpuops catalog`")
    tpu = spec.tpu
    return TpuVmRequest(
        name=tpu_name(spec), zone=zone, accelerator_type=tpu.type, machine_type=shape.machine_type,
        hosts=shape.hosts, image_project=shape.image_project, image_family=shape.image_family,
        boot_disk_type=shape.boot_disk_type, boot_disk_gb=shape.boot_disk_gb, topology=shape.topology,
        provisioning=provisioning(spec), max_run_seconds=tpu.flex_start_seconds, reservation=tpu.reservation,
        network=tpu.network, subnetwork=tpu.subnetwork, labels=spec.resource_labels, ssh_keys=ssh_keys,
        service_account=tpu.service_account,
    )


def as_tpu_node(found: TpuSlice, accelerator_type: str) -> TpuNode:
    """The slice as the workflows read a TPU: workers indexed by rank, the slice's state as the node's."""
    workers = tuple(Worker(index=host.rank, internal_ip=host.internal_ip, external_ip=host.external_ip,
                           home=host.home) for host in found.hosts)
    health = "HEALTHY" if found.state == "READY" else "UNHEALTHY" if found.state in ("BROKEN", "PREEMPTED") else None
    return TpuNode(name=found.name, zone=found.zone, accelerator_type=accelerator_type, state=found.state,
                   mode="vm", health=health, runtime=None, workers=workers, labels=found.labels)
