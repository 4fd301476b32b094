"""State model of Compute Engine TPUs in the Compute fake (the wire is tests/fakes/compute_tpus.py): TPU machine
types, regional workload policies, instance templates, zonal managed instance groups that make multi-host slices all
at once, and the metadata Compute Engine writes on TPU hosts.

Knobs on `TpuComputeModel` (reached as `fake_gcp.compute_tpus`):
- `allowed_machine_types` (None: all): any other TPU machine type is refused as the allowlist does;
- `quota_chips[region]`: chips the project may hold there (a create beyond it fails with QUOTA_EXCEEDED);
- `compute.capacity_failures[zone]` (shared with plain VMs): a group's or an instance's creation fails for want of
  capacity, so many times (-1: always); a group tries again `attempt_interval` seconds later;
- `single_host_metadata`: whether a single-host TPU instance gets `agent-worker-number` and `tpu-env` (UNCONFIRMED
  on Google's side, so both answers are testable);
- `preempt(zone, instance)`, `break_slice(zone, group)`, `lose_host(zone, instance)`.
"""

from __future__ import annotations

import random
import string
import time
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.compute import VM_CAPACITY_CODE, ComputeModel, FakeInstance
from tests.fakes.http import HttpError
from tests.fakes.operations import OperationFailed

# machine type -> (guestAcceleratorType, chips on the VM)
TPU_MACHINE_TYPES = {
    "tpu7x-standard-1t": ("tpu-v7x", 1), "tpu7x-standard-4t": ("tpu-v7x", 4),
    "ct6e-standard-1t": ("tpu-v6e", 1), "ct6e-standard-4t": ("tpu-v6e", 4), "ct6e-standard-8t": ("tpu-v6e", 8),
    "ct5p-hightpu-4t": ("tpu-v5p", 4),
}
GENERATION_OF = {"tpu-v7x": "tpu7x", "tpu-v6e": "v6e", "tpu-v5p": "v5p"}
NOT_ALLOWED = "This user agent is not allowed to use the machine type {machine}"
QUOTA_MESSAGE = "Quota '{metric}' exceeded. Limit: {limit}.0 in region {region}."


@dataclass
class FakePolicy:
    name: str
    region: str
    body: dict[str, Any]  # the ResourcePolicy as inserted (JSON)


@dataclass
class FakeTemplate:
    name: str
    body: dict[str, Any]  # the InstanceTemplate as inserted (JSON)


@dataclass
class FakeGroup:
    name: str
    zone: str
    template: str  # the template's name
    policy: str | None  # the workload policy's name
    target_size: int
    body: dict[str, Any]
    topology: str = ""
    topology_state: str = "ACTIVATING"
    instances: list[str] = field(default_factory=list)
    last_error: tuple[str, str] | None = None  # (code, message) of the last failed creation attempt
    attempts: int = 0
    next_attempt: float = 0.0  # monotonic time of the next creation attempt after a failed one


def machine_name(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


class TpuComputeModel:
    def __init__(self, compute: ComputeModel, seed: int = 7) -> None:
        self.compute = compute
        self.policies: dict[tuple[str, str], FakePolicy] = {}
        self.templates: dict[str, FakeTemplate] = {}
        self.groups: dict[tuple[str, str], FakeGroup] = {}
        self.allowed_machine_types: set[str] | None = None
        self.quota_chips: dict[str, int] = {}
        self.single_host_metadata = True
        self.attempt_interval = 30.0  # a BULK group that could not make its VMs tries again this much later
        self.random = random.Random(seed)

    @property
    def lock(self) -> Any:
        return self.compute.lock

    # ------------------------------------------------------------------------------------------- checks
    def check_allowed(self, machine: str) -> None:
        if machine in TPU_MACHINE_TYPES and self.allowed_machine_types is not None \
                and machine not in self.allowed_machine_types:
            raise HttpError(403, NOT_ALLOWED.format(machine=machine))

    def check_quota(self, zone: str, machine: str, count: int) -> None:
        region = region_of(zone)
        limit = self.quota_chips.get(region)
        if limit is None or machine not in TPU_MACHINE_TYPES:
            return
        accelerator, chips = TPU_MACHINE_TYPES[machine]
        held = sum(TPU_MACHINE_TYPES[machine_name(i.machine_type)][1] for (z, _), i in self.compute.instances.items()
                   if region_of(z) == region and machine_name(i.machine_type) in TPU_MACHINE_TYPES)
        if held + chips * count > limit:
            metric = f"{accelerator.upper().replace('-', '_')}_CHIPS"
            raise OperationFailed(403, "QUOTA_EXCEEDED: " + QUOTA_MESSAGE.format(metric=metric, limit=limit,
                                                                                region=region))

    def take_capacity_failure(self, zone: str) -> bool:
        left = self.compute.capacity_failures.get(zone, 0)
        if left:
            self.compute.capacity_failures[zone] = left - 1 if left > 0 else left
            return True
        return False

    def single_instance(self, instance: FakeInstance) -> None:
        """An instance inserted by name with a TPU machine type: refused, or given the metadata Google writes."""
        machine = machine_name(instance.machine_type)
        self.check_allowed(machine)
        try:
            self.check_quota(instance.zone, machine, 1)
        except OperationFailed as failure:
            raise HttpError(403, failure.message) from None
        if machine in TPU_MACHINE_TYPES and self.single_host_metadata:
            instance.metadata.update(self.host_metadata(machine, 1, 0, []))

    def host_metadata(self, machine: str, hosts: int, rank: int, peers: list[str]) -> dict[str, str]:
        accelerator, chips = TPU_MACHINE_TYPES[machine]
        generation = GENERATION_OF[accelerator]
        cores = chips * hosts * (1 if generation == "v6e" else 2)
        return {
            "accelerator-type": f"{generation}-{cores}",
            "agent-worker-number": str(rank),
            "worker-network-endpoints": ",".join(f"unknown:unknown:{ip}" for ip in peers),
            "tpu-env": f"TPU_ACCELERATOR_TYPE: '{generation}-{cores}'\nWORKER_ID: '{rank}'\n",
        }

    # ------------------------------------------------------------------------------------------- groups
    def advance_groups(self) -> None:
        """Each group creating its VMs: all at once (BULK) once capacity and quota allow, one attempt per read."""
        with self.lock:
            for group in self.groups.values():
                if not group.instances and group.target_size > 0 and time.monotonic() >= group.next_attempt:
                    self._attempt(group)

    def _attempt(self, group: FakeGroup) -> None:
        template = self.templates.get(group.template)
        if template is None:
            return
        properties = template.body.get("properties", {})
        machine = machine_name(properties.get("machineType", ""))
        group.attempts += 1
        group.last_error = None
        try:
            self.check_quota(group.zone, machine, group.target_size)
        except OperationFailed as failure:
            group.last_error = tuple(failure.message.split(": ", 1))  # type: ignore[assignment]
        else:
            if self.take_capacity_failure(group.zone):
                group.last_error = (VM_CAPACITY_CODE, "The zone does not have enough resources available to fulfil "
                                                      "the request.")
        if group.last_error is not None:
            group.next_attempt = time.monotonic() + self.attempt_interval
            return
        suffixes = ["".join(self.random.choices(string.ascii_lowercase + string.digits, k=4))
                    for _ in range(group.target_size)]
        ranks = list(range(group.target_size))
        self.random.shuffle(ranks)  # the names say nothing of the ranks
        ips = [f"10.140.1.{10 + rank}" for rank in range(group.target_size)]
        items = properties.get("metadata", {}).get("items", [])
        for suffix, rank in zip(suffixes, ranks, strict=True):
            name = f"{group.body.get('baseInstanceName') or group.name}-{suffix}"
            instance = FakeInstance(
                name=name, zone=group.zone, machine_type=machine, labels=dict(properties.get("labels", {})),
                metadata={item["key"]: item.get("value", "") for item in items},
                status="RUNNING", internal_ip=ips[rank], wants_external_ip=True, group=group.name,
                scheduling=dict(properties.get("scheduling", {})),
            )
            instance.external_ip = self.compute.external_ip(name, rank)
            instance.metadata.update(self.host_metadata(machine, group.target_size, rank, ips))
            instance.metadata["created-by"] = (f"projects/{self.compute.project}/zones/{group.zone}/"
                                               f"instanceGroupManagers/{group.name}")
            self.compute.instances[(group.zone, name)] = instance
            group.instances.append(name)
        group.topology_state = "ACTIVE"

    def delete_group(self, group: FakeGroup) -> None:
        for name in group.instances:
            self.compute.instances.pop((group.zone, name), None)
        self.groups.pop((group.zone, group.name), None)

    # ------------------------------------------------------------------------------------------- events
    def preempt(self, zone: str, instance: str) -> None:
        """Compute Engine reclaims a Spot VM: it stops (instanceTerminationAction STOP) and reads TERMINATED."""
        with self.lock:
            found = self.compute.instances[(zone, instance)]
            found.status = "TERMINATED"
            group = self.groups.get((zone, found.group or ""))
            if group is not None:
                group.topology_state = "INCOMPLETE"

    def break_slice(self, zone: str, group_name: str) -> None:
        """The slice's interconnect fails: the group says its topology FAILED, the VMs still run."""
        with self.lock:
            self.groups[(zone, group_name)].topology_state = "FAILED"

    def lose_host(self, zone: str, instance: str) -> None:
        """A host is gone (deleted by hand or by Google); the group, with repair off, does not make it again."""
        with self.lock:
            found = self.compute.instances.pop((zone, instance))
            group = self.groups.get((zone, found.group or ""))
            if group is not None:
                group.instances.remove(instance)
                group.topology_state = "INCOMPLETE"
