"""The cloud interface: what `up`, `status` and `down` need from a provider, and nothing more.

Two providers implement it: `cloud/gcp` (Google's clients) and `cloud/local` (workers as directories).
Everything here is provider-neutral: plain frozen dataclasses in, frozen dataclasses out, and errors
from `tpuops.errors` (an adapter never lets an SDK exception or type escape).

Conventions every implementation keeps:
- `get_*` returns None when the resource does not exist (never raises "not found").
- `create_*` blocks until the resource is usable or the operation failed (CapacityError when the zone
  is out of capacity, TransientError for 429/500/503/deadline, CloudError otherwise).
- `delete_*` blocks until the resource is gone; deleting something already gone is not an error.
- Labels are plain `str -> str` mappings; ownership is decided above this layer (plan.py, ops/).
- `find_*(labels, zones)` returns every resource carrying all of `labels`, in `zones` or (no zones) in every
  zone of the project. It raises when any part of the search did not run (a call failed, a zone was
  unreachable): an empty answer always means a complete search found nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from tpuops.cloud.compute_tpu import ComputeTpuApi
    from tpuops.cloud.quotas import QuotaApi

TpuMode = Literal["vm", "node"]

# TPU states after which the TPU only holds quota: delete and create again. BROKEN is a Compute Engine slice's
# (cloud/compute_tpu.py): a host lost or stopped, or its accelerator topology not whole.
DEAD_TPU_STATES = frozenset({"PREEMPTED", "TERMINATED", "BROKEN"})
DEAD_QUEUED_STATES = frozenset({"FAILED", "SUSPENDED"})


@dataclass(frozen=True)
class Worker:
    """One host of a TPU slice (or the client VM of a legacy Node)."""

    index: int
    internal_ip: str
    external_ip: str | None = None
    home: str | None = None  # provider local only: the directory standing for this host's home


@dataclass(frozen=True)
class HostKey:
    """An SSH host key a worker published (guest attributes `hostkeys/`), for pinning."""

    worker: int
    key_type: str  # e.g. "ssh-ed25519"
    key: str  # base64 body, as in known_hosts


@dataclass(frozen=True)
class TpuRequest:
    name: str
    zone: str
    accelerator_type: str
    runtime: str  # TPU VM runtime version, or the legacy Node's tensorflow_version
    mode: TpuMode = "vm"
    preemptible: bool = False
    spot: bool = False
    service_account: str | None = None  # TPU VM only; a legacy Node runs as the Cloud TPU service agent
    network: str = "default"
    subnetwork: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    ssh_keys: str | None = None  # value of the `ssh-keys` metadata (TPU VM only)
    workers: int | None = None  # provider local only: simulated hosts (default: the type's host count)
    slices: int = 1  # Multislice (queued resources only): nodes NAME-0..NAME-(slices-1), one per slice
    reservation: str | None = None  # queued resources only: the reservation to create from (its full name)


@dataclass(frozen=True)
class TpuNode:
    name: str
    zone: str
    accelerator_type: str
    state: str  # CREATING, READY, PREEMPTED, TERMINATED, DELETING, ... (Google's names)
    mode: TpuMode = "vm"
    health: str | None = None
    runtime: str | None = None
    workers: tuple[Worker, ...] = ()
    service_account: str | None = None  # the identity the TPU reads and writes GCS as
    labels: Mapping[str, str] = field(default_factory=dict)
    spot: bool = False  # spot and preemptible TPUs draw on the preemptible quota (`tpuops quota`)
    preemptible: bool = False


@dataclass(frozen=True)
class QueuedResource:
    name: str
    zone: str
    state: str  # ACCEPTED, PROVISIONING, ACTIVE, FAILED, SUSPENDED, WAITING_FOR_RESOURCES, ...
    node_name: str | None = None  # the node it creates; the first slice's node for Multislice
    labels: Mapping[str, str] = field(default_factory=dict)  # the labels of the node it will create
    detail: str | None = None  # why it failed, when it did
    created_at: datetime | None = None  # when it was queued (UTC; status shows a waiting one's age)
    node_names: tuple[str, ...] = ()  # every node it creates, in slice order (one unless Multislice)
    accelerator_type: str | None = None  # of each node it creates (what it holds of the quota)
    spot: bool = False  # a spot queued resource (or one whose node is preemptible): the preemptible quota


@dataclass(frozen=True)
class VmRequest:
    name: str
    zone: str
    machine_type: str
    disk_gb: int
    image_project: str
    image_family: str
    network: str = "default"
    subnetwork: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    ssh_keys: str | None = None
    service_account: str | None = None  # None: the project's Compute default account
    startup_script: str | None = None  # the `startup-script` metadata: run as root at every boot
    tags: tuple[str, ...] = ()  # network tags, which firewall rules may name as source or target


@dataclass(frozen=True)
class Vm:
    name: str
    zone: str
    state: str  # PROVISIONING, RUNNING, STOPPED, TERMINATED, ...
    internal_ip: str | None = None
    external_ip: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    machine_type: str | None = None  # e2-micro, n1-standard-2, ... (the last part of Compute's URL)


@dataclass(frozen=True)
class FirewallRule:
    """An ingress rule of a VPC network, as far as "may A reach B's SSH port" needs it."""

    name: str
    network: str  # the network's name, not its URL
    allowed: tuple[tuple[str, tuple[str, ...]], ...]  # (protocol, ports): ("tcp", ("22", "8000-8100")); "all"
    source_ranges: tuple[str, ...] = ()
    source_tags: tuple[str, ...] = ()
    source_service_accounts: tuple[str, ...] = ()
    target_tags: tuple[str, ...] = ()
    target_service_accounts: tuple[str, ...] = ()
    disabled: bool = False


@dataclass(frozen=True)
class Bucket:
    name: str
    location: str  # upper case, as GCS reports it (EUROPE-WEST4)
    labels: Mapping[str, str] = field(default_factory=dict)
    uniform_access: bool = True


@dataclass(frozen=True)
class ZoneOffer:
    """What one zone's TPU API lists for one mode: accelerator types and runtime versions (for legacy Nodes,
    their TensorFlow/PyTorch versions). Asked fresh every time: the catalog is the stale copy of this."""

    zone: str
    mode: TpuMode
    accelerator_types: tuple[str, ...]
    runtimes: tuple[str, ...]
    any_runtime: bool = False  # the provider runs whatever runtime is named (the local simulator)


class TpuApi(Protocol):
    """TPU VMs and pod slices (mode vm), or legacy TPU Nodes (mode node): one implementation per mode."""

    def get_node(self, zone: str, name: str) -> TpuNode | None: ...
    def list_nodes(self, zone: str) -> list[TpuNode]: ...
    def create_node(self, request: TpuRequest) -> TpuNode: ...
    def delete_node(self, zone: str, name: str) -> None: ...
    def host_keys(self, zone: str, name: str) -> list[HostKey]: ...
    def zone_offer(self, zone: str) -> ZoneOffer | None:
        """What `zone` offers this mode (None when the API does not know the zone)."""
        ...
    def find_nodes(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[TpuNode]: ...


class QueuedResourceApi(Protocol):
    def get_queued(self, zone: str, name: str) -> QueuedResource | None: ...
    def list_queued(self, zone: str) -> list[QueuedResource]: ...
    def create_queued(self, name: str, request: TpuRequest, wait_seconds: float,
                      valid_until: float | None = None) -> QueuedResource:
        """Queue TPU `request.name` as `name`; wait at most `wait_seconds` for ACTIVE; FAILED -> CapacityError.

        With `valid_until` (seconds) the provider itself drops the request (FAILED) when it is not granted
        within that time, so a request nobody waits for any more is never granted later."""
        ...

    def delete_queued(self, zone: str, name: str) -> None:
        """Delete with force: the node it created goes too."""
        ...

    def find_queued(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[QueuedResource]: ...


class VmApi(Protocol):
    def get_vm(self, zone: str, name: str) -> Vm | None: ...
    def list_vms(self, zone: str) -> list[Vm]: ...
    def create_vm(self, request: VmRequest) -> Vm: ...
    def start_vm(self, zone: str, name: str) -> Vm:
        """Start a stopped VM (TERMINATED in Compute's words) and wait until it runs."""
        ...
    def delete_vm(self, zone: str, name: str) -> None: ...
    def host_keys(self, zone: str, name: str) -> list[HostKey]: ...
    def find_vms(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[Vm]: ...


class StorageApi(Protocol):
    def get_bucket(self, name: str) -> Bucket | None: ...
    def create_bucket(self, name: str, location: str, labels: Mapping[str, str]) -> Bucket:
        """Create with uniform bucket-level access on."""
        ...

    def bucket_is_empty(self, name: str) -> bool: ...
    def delete_bucket(self, name: str, force: bool = False) -> None: ...
    def bucket_members(self, name: str, role: str) -> frozenset[str]:
        """Members ("serviceAccount:x@y") bound to `role` on the bucket."""
        ...

    def grant_on_bucket(self, name: str, member: str, role: str) -> bool:
        """Add `member` to `role` on this bucket only, keeping every other binding; False if already there."""
        ...

    def find_buckets(self, labels: Mapping[str, str]) -> list[Bucket]:
        """The project's buckets carrying all of `labels`."""
        ...


class FirewallApi(Protocol):
    def ingress_rules(self, network: str) -> list[FirewallRule]:
        """The enabled and disabled ingress rules of `network` (a name); allow rules only."""
        ...


class ProjectApi(Protocol):
    def default_service_account(self) -> str:
        """The Compute default service account (PROJECT_NUMBER-compute@developer.gserviceaccount.com)."""
        ...


@dataclass(frozen=True)
class Cloud:
    """One provider's clients for one project. `tpu_nodes` is None where legacy Nodes do not exist."""

    project: str
    tpus: TpuApi
    queued: QueuedResourceApi
    vms: VmApi
    storage: StorageApi
    projects: ProjectApi
    tpu_nodes: TpuApi | None = None
    firewalls: FirewallApi | None = None  # None where there is no VPC (the local simulator)
    quotas: QuotaApi | None = None  # the project's TPU quota (`tpuops quota`)
    compute_tpus: ComputeTpuApi | None = None  # TPUs as Compute Engine VMs (cloud/compute_tpu.py)

    def tpu_api(self, mode: TpuMode) -> TpuApi:
        if mode == "node":
            if self.tpu_nodes is None:
                from tpuops.errors import CloudError

                raise CloudError("this provider has no legacy TPU Nodes", "use tpu.mode: vm")
            return self.tpu_nodes
        return self.tpus


def has_labels(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """Whether `labels` carries every key of `wanted` with the same value."""
    return all(labels.get(key) == value for key, value in wanted.items())
