"""What every resource kind's handler offers, and what it works with.

A handler (bucket, iam, tpu, queued_resource, compute_tpu, client_vm, guard_vm) knows one kind of resource over the
`Cloud` interface: `observe` it for `up`'s plan, `ensure` what the plan decided, `delete` it, `describe` it for
`status`, and find it by label for `down`. It declares what it `depends_on`; `up` schedules the handlers by that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from tpuops.cloud.base import Cloud, TpuMode, TpuNode, has_labels
from tpuops.plan import Action, Kind, ObservedResource
from tpuops.spec import CLUSTER_LABEL, Spec
from tpuops.state import RECORD_TYPES, ClusterState, ResourceRecord, StateStore

# Where a line of `up`'s progress puts a recovery's time (guard/goodput.py's buckets), said by whoever emits it:
# waiting for capacity (a zone full, a queued resource waiting), or the TPU being created. None: no change.
Phase = Literal["waiting", "provisioning"]
MISSING = "MISSING"


class Progress(Protocol):
    """`up`'s progress: (kind, name, what is happening), and the phase it starts, when it starts one."""

    def __call__(self, kind: str, name: str, text: str, phase: Phase | None = None) -> None: ...


def owned_by(labels: object, cluster: str) -> bool:
    """Whether a resource carries this cluster's label: tpuops touches nothing else."""
    return isinstance(labels, Mapping) and has_labels(labels, {CLUSTER_LABEL: cluster})  # the listing filter's rule


def silent(kind: str, name: str, text: str, phase: Phase | None = None) -> None:
    return None


@dataclass(frozen=True)
class Knobs:
    """How `up` waits: poll interval, operation timeout, capacity backoff (tests shrink them) and the user's
    --wait-for-capacity."""

    poll_interval: float = 5.0
    operation_timeout: float = 1800.0
    capacity_backoff: float = 30.0
    wait_for_capacity: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str], wait_for_capacity: float = 0.0) -> Knobs:
        return cls(
            poll_interval=float(env.get("TPUOPS_POLL_INTERVAL", cls.poll_interval)),
            operation_timeout=float(env.get("TPUOPS_OPERATION_TIMEOUT", cls.operation_timeout)),
            capacity_backoff=float(env.get("TPUOPS_CAPACITY_BACKOFF", cls.capacity_backoff)),
            wait_for_capacity=wait_for_capacity,
        )


class Ledger:
    """The cluster's state during one `up`: every change is saved at once, from whichever thread makes it,
    so an interrupted `up` leaves nothing that `up` (resumes) or `down` (deletes) cannot find."""

    def __init__(self, store: StateStore, state: ClusterState) -> None:
        self.store = store
        self.state = state
        self._lock = threading.Lock()

    def recorded(self, kind: Kind) -> ResourceRecord | None:
        with self._lock:
            return self.state.resource(kind)

    def record(self, kind: Kind, name: str, zone: str | None, status: str, **facts: object) -> None:
        """Record a resource's status; facts recorded before (its location, node, ...) are kept."""
        with self._lock:
            previous = self.state.resource(kind)
            kept = previous.model_dump(exclude={"kind", "name", "zone", "status", "updated_at"}) if previous else {}
            record = RECORD_TYPES[kind](**{**kept, **facts}, kind=kind, name=name, zone=zone, status=status)
            self.state.set_resource(record)  # type: ignore[arg-type]
            self.store.save(self.state)

    def update(self, change: Callable[[ClusterState], None]) -> None:
        with self._lock:
            change(self.state)
            self.store.save(self.state)

    def forget_workers(self) -> None:
        with self._lock:
            self.store.forget_workers(self.state)


@dataclass(frozen=True)
class Job:
    """What the handlers work with during one `up`."""

    spec: Spec
    cloud: Cloud
    ledger: Ledger
    knobs: Knobs = Knobs()
    progress: Progress = silent
    ssh_keys: str | None = None  # the `ssh-keys` metadata for new TPU VMs and client VMs


@dataclass(frozen=True)
class Found:
    """What observing or ensuring one kind learned: the resource as the plan judges it (None: not there),
    and what the kinds depending on it need (the TPU itself; who may use the bucket)."""

    resource: ObservedResource | None = None
    node: TpuNode | None = None
    member: str | None = None
    slices: tuple[TpuNode, ...] = ()  # Multislice: every slice's node, in slice order (`node` is the first)

    @property
    def nodes(self) -> tuple[TpuNode, ...]:
        """The TPU's node, or every slice's."""
        return self.slices or ((self.node,) if self.node is not None else ())


Known = Mapping[Kind, Found]


@dataclass(frozen=True)
class Doomed:
    """A resource `down` deletes."""

    kind: Kind
    name: str
    zone: str | None = None


@dataclass(frozen=True)
class Finding:
    """A resource found by its label; deleting it also deletes the TPUs it `brings_along` (a queued resource's
    node, or every slice's)."""

    doomed: Doomed
    brings_along: tuple[Doomed, ...] = ()


@dataclass(frozen=True)
class ResourceStatus:
    """One row of `tpuops status`."""

    kind: str
    name: str
    zone: str | None
    state: str  # live state, "MISSING" when the cloud no longer has it
    detail: str = ""


@dataclass(frozen=True)
class Described:
    row: ResourceStatus
    node: TpuNode | None = None  # the TPU, for kinds that are one or make one
    queued_state: str | None = None  # a queued resource's own state
    lost_slice: str | None = None  # Multislice: a slice's node that is gone or dead ("NAME-1 PREEMPTED")
    slice_nodes: tuple[TpuNode | None, ...] = ()  # Multislice: every slice's node (None: gone), in slice order


class Handler(Protocol):
    kind: Kind
    zonal: bool  # lives in a zone (down searches zones for it by label)

    def depends_on(self, spec: Spec) -> tuple[Kind, ...]: ...
    def observe(self, job: Job, known: Known) -> Found: ...
    def ensure(self, job: Job, action: Action, known: Known) -> Found: ...
    def delete(self, cloud: Cloud, mode: TpuMode, doomed: Doomed) -> None: ...
    def describe(self, cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> Described: ...
    def find(self, cloud: Cloud, mode: TpuMode, cluster: str, zone: str) -> list[Finding]: ...
    def labels(self, cloud: Cloud, mode: TpuMode, name: str, zone: str) -> Mapping[str, str] | None:
        """The labels of the resource `name`, None when it does not exist."""
        ...


class TpuHandler(Handler, Protocol):
    """A kind that is the cluster's TPU (made directly, through a queued resource, or by Compute Engine)."""

    def create(self, job: Job, action: Action) -> TpuNode:
        """Make the TPU in the spec's zones, with whatever this kind does first (clearing what an earlier TPU
        left), and record it: `ensure` and `up` across pools (ops/placement.py) both create through here."""
        ...
