"""TPUs as Compute Engine VMs (TPU7x and later; v5p and v6e too): what a provider offers, beside cloud/base.py.

One host is one instance named after the TPU. Several hosts are a slice: a regional workload policy (HIGH_THROUGHPUT,
the slice's accelerator topology), an instance template and a zonal managed instance group of that name (all VMs at
once, no repair of single VMs), created in that order and deleted in the reverse one.

A host's rank is the `agent-worker-number` Compute Engine writes into its metadata, never its place in a listing or
its name: a group names its instances at random. The conventions of cloud/base.py hold (get -> None when missing,
create blocks until usable or raises, delete of something gone is no error).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from tpuops.cloud.base import HostKey

Provisioning = Literal["standard", "spot", "flex-start", "reservation-bound"]
# A slice's state, in the TPU API's words where one fits, so the workflows judge both alike:
# READY (every host running, the topology whole), CREATING, PREEMPTED (a Spot host was reclaimed), BROKEN (a host
# stopped, missing or failed, or the group says the topology is not whole), DELETING.
SliceState = Literal["CREATING", "READY", "PREEMPTED", "BROKEN", "DELETING"]
# Every VM of a Compute Engine TPU carries its accelerator type under this label: a client or guard VM does not.
ACCELERATOR_LABEL = "tpuops-accelerator"
STOPPED = frozenset({"STOPPING", "TERMINATED", "STOPPED", "SUSPENDING", "SUSPENDED"})  # a host's Compute statuses
BROKEN_TOPOLOGY = frozenset({"FAILED", "INCOMPLETE", "DEACTIVATING"})  # a group's applied accelerator topology


def is_compute_tpu(labels: Mapping[str, str]) -> bool:
    """Whether a Compute Engine VM is (a host of) a TPU tpuops made, not a plain VM."""
    return ACCELERATOR_LABEL in labels


def policy_name(name: str) -> str:
    return f"{name}-wp"


def template_name(name: str) -> str:
    return f"{name}-it"


@dataclass(frozen=True)
class TpuVmRequest:
    name: str
    zone: str
    accelerator_type: str  # tpu7x-32, v6e-8, ...: recorded as a label and in `status`
    machine_type: str  # tpu7x-standard-4t, ct6e-standard-8t, ct5p-hightpu-4t
    hosts: int
    image_project: str
    image_family: str
    boot_disk_type: str
    boot_disk_gb: int
    topology: str | None = None  # the workload policy's acceleratorTopology (several hosts only), e.g. 2x2x4
    provisioning: Provisioning = "standard"
    max_run_seconds: int | None = None  # flex-start: Compute Engine deletes the VMs after this long
    reservation: str | None = None  # reservation-bound: the reservation's name
    network: str = "default"
    subnetwork: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    ssh_keys: str | None = None
    service_account: str | None = None  # None: the project's Compute default account

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


@dataclass(frozen=True)
class TpuHost:
    """One VM of the slice: its rank from `agent-worker-number`, its instance name, its addresses."""

    rank: int
    instance: str
    internal_ip: str
    external_ip: str | None
    status: str  # Compute Engine's: PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED, ...
    preempted: bool = False
    home: str | None = None  # provider local only: the directory standing for this host's home


@dataclass(frozen=True)
class TpuSlice:
    name: str
    zone: str
    machine_type: str
    state: SliceState
    hosts: tuple[TpuHost, ...] = ()  # in rank order
    expected_hosts: int = 1
    labels: Mapping[str, str] = field(default_factory=dict)
    provisioning: Provisioning = "standard"
    topology_state: str | None = None  # the group's applied accelerator topology: ACTIVE, INCOMPLETE, FAILED, ...
    detail: str = ""  # why it is not READY, in a few words

    @property
    def multi_host(self) -> bool:
        return self.expected_hosts > 1


class ComputeTpuApi(Protocol):
    """Single-host TPU instances and multi-host slices (policy + template + group) on Compute Engine."""

    def create_tpu_vm(self, request: TpuVmRequest) -> TpuSlice:
        """Create and wait until every host runs with its rank. A refusal (quota, allowlist, capacity) leaves
        nothing behind: what was created for it is deleted before the error is raised."""
        ...

    def get_tpu_vm(self, zone: str, name: str) -> TpuSlice | None: ...
    def delete_tpu_vm(self, zone: str, name: str) -> None:
        """The group (with its VMs), the template and the policy, in that order; or the one instance."""
        ...

    def host_keys(self, zone: str, name: str) -> list[HostKey]:
        """Each host's published SSH host keys (guest attributes `hostkeys/`), `worker` = its rank."""
        ...

    def find_tpu_vms(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[TpuSlice]:
        """Every slice or single-host TPU carrying `labels`, in `zones` or every zone."""
        ...


def slice_state(hosts: Sequence[TpuHost], expected: int, topology_state: str | None) -> tuple[SliceState, str]:
    """A slice's state from its hosts and its group's topology, the same for Compute Engine and the local
    simulator. Whole (READY) only when every host runs with its own rank and the group says the topology is ACTIVE."""
    preempted = [host.instance for host in hosts if host.preempted]
    if preempted:
        return "PREEMPTED", f"Spot VM {preempted[0]} was preempted"
    stopped = [f"{host.instance} {host.status}" for host in hosts if host.status in STOPPED]
    if stopped:
        return "BROKEN", f"host {stopped[0]}"
    if hosts and len(hosts) < expected:
        return "BROKEN", f"{len(hosts)} of {expected} hosts"
    if topology_state in BROKEN_TOPOLOGY:
        return "BROKEN", f"accelerator topology {topology_state}"
    if len(hosts) < expected or any(host.status != "RUNNING" for host in hosts):
        return "CREATING", f"{sum(h.status == 'RUNNING' for h in hosts)} of {expected} hosts running"
    ranks = sorted(host.rank for host in hosts)
    if ranks != list(range(expected)):
        return "CREATING", "hosts without their agent-worker-number yet"
    if topology_state not in (None, "ACTIVE"):
        return "CREATING", f"accelerator topology {topology_state}"
    return "READY", ""

