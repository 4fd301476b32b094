"""Compute Engine TPUs in the Compute fake: TPU machine types, regional workload policies, instance templates and
zonal managed instance groups that make multi-host slices, with the metadata Compute Engine writes on TPU hosts.

Every answer is the library's own message (`compute_v1.X.to_json`), every request is parsed with `from_json`, so the
real InstancesClient, InstanceTemplatesClient, ResourcePoliciesClient and InstanceGroupManagersClient talk to it.

Knobs on `TpuComputeModel` (reached as `fake_gcp.compute_tpus`):
- `allowed_machine_types` (None: all): any other TPU machine type is refused as the allowlist does;
- `quota_chips[region]`: chips the project may hold there (a create beyond it fails with QUOTA_EXCEEDED);
- `compute.capacity_failures[zone]` (shared with plain VMs): a group's or an instance's creation fails for want of
  capacity, so many times (-1: always);
- `single_host_metadata`: whether a single-host TPU instance gets `agent-worker-number` and `tpu-env` (UNCONFIRMED
  on Google's side, so both answers are testable);
- `preempt(zone, instance)`, `break_slice(zone, group)`, `lose_host(zone, instance)`.
"""

from __future__ import annotations

import json
import random
import string
import time
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.compute import VM_CAPACITY_CODE, ComputeFake, ComputeModel, FakeInstance
from tests.fakes.http import HttpError, Request
from tests.fakes.operations import FakeOperation, OperationFailed

PROJECT_PATH = r"^/compute/v1/projects/(?P<project>[^/]+)"
ZONE = PROJECT_PATH + r"/zones/(?P<zone>[^/]+)"
REGION = PROJECT_PATH + r"/regions/(?P<region>[^/]+)"
GLOBAL = PROJECT_PATH + r"/global"
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


class TpuComputeRoutes:
    """The routes of the TPU parts, added to a ComputeFake."""

    def __init__(self, fake: ComputeFake, model: TpuComputeModel) -> None:
        self.fake = fake
        self.model = model
        fake.tpu_checks = model.single_instance
        fake.routes[:0] = [
            ("GET", ZONE + r"/machineTypes/(?P<name>[^/]+)$", self.get_machine_type),
            ("POST", REGION + r"/resourcePolicies$", self.insert_policy),
            ("GET", REGION + r"/resourcePolicies/(?P<name>[^/]+)$", self.get_policy),
            ("DELETE", REGION + r"/resourcePolicies/(?P<name>[^/]+)$", self.delete_policy),
            ("POST", GLOBAL + r"/instanceTemplates$", self.insert_template),
            ("GET", GLOBAL + r"/instanceTemplates/(?P<name>[^/]+)$", self.get_template),
            ("DELETE", GLOBAL + r"/instanceTemplates/(?P<name>[^/]+)$", self.delete_template),
            ("POST", ZONE + r"/instanceGroupManagers$", self.insert_group),
            ("GET", ZONE + r"/instanceGroupManagers$", self.list_groups),
            ("GET", ZONE + r"/instanceGroupManagers/(?P<name>[^/]+)$", self.get_group),
            ("DELETE", ZONE + r"/instanceGroupManagers/(?P<name>[^/]+)$", self.delete_group),
            ("POST", ZONE + r"/instanceGroupManagers/(?P<name>[^/]+)/listManagedInstances$", self.managed_instances),
            ("POST", ZONE + r"/instanceGroupManagers/(?P<name>[^/]+)/resize$", self.resize_group),
            ("GET", REGION + r"/operations/(?P<op>[^/]+)$", self.get_region_operation),
            ("POST", REGION + r"/operations/(?P<op>[^/]+)/wait$", self.wait_region_operation),
            ("GET", GLOBAL + r"/operations/(?P<op>[^/]+)$", self.get_global_operation),
            ("POST", GLOBAL + r"/operations/(?P<op>[^/]+)/wait$", self.wait_global_operation),
        ]
        original = fake.handle

        def handle(request: Request) -> tuple[int, Any]:
            self.model.advance_groups()
            return original(request)

        fake.server.handler = handle

    # ------------------------------------------------------------------------------------- machine types
    def get_machine_type(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        if name not in TPU_MACHINE_TYPES:
            raise HttpError(404, f"The resource 'projects/{project}/zones/{zone}/machineTypes/{name}' was not found")
        accelerator, chips = TPU_MACHINE_TYPES[name]
        message = compute_v1.MachineType(
            name=name, zone=zone, guest_cpus=224 if accelerator == "tpu-v7x" else 180,
            accelerators=[compute_v1.Accelerators(guest_accelerator_type=accelerator, guest_accelerator_count=chips)],
        )
        return _dict(message)

    # ------------------------------------------------------------------------------------------ policies
    def insert_policy(self, request: Request, project: str, region: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        message = compute_v1.ResourcePolicy.from_json(json.dumps(request.body))
        key = (region, message.name)
        with self.model.lock:
            if key in self.model.policies:
                raise HttpError(409, f"The resource 'projects/{project}/regions/{region}/resourcePolicies/"
                                     f"{message.name}' already exists")
            self.model.policies[key] = FakePolicy(message.name, region, request.body)
        return self._operation(self._start(f"projects/{project}/regions/{region}", message.name), "insert")

    def get_policy(self, request: Request, project: str, region: str, name: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        policy = self._found(self.model.policies.get((region, name)), f"regions/{region}/resourcePolicies/{name}")
        message = compute_v1.ResourcePolicy.from_json(json.dumps(policy.body))
        message.region = region
        message.status = "READY"
        return _dict(message)

    def delete_policy(self, request: Request, project: str, region: str, name: str) -> dict[str, Any]:
        with self.model.lock:
            self._found(self.model.policies.get((region, name)), f"regions/{region}/resourcePolicies/{name}")
            users = [g.name for g in self.model.groups.values() if g.policy == name and region_of(g.zone) == region]
            if users:
                raise HttpError(400, f"The resource_policy resource '{name}' is already being used by "
                                     f"'instanceGroupManagers/{users[0]}'")
            self.model.policies.pop((region, name))
        return self._operation(self._start(f"projects/{project}/regions/{region}", name), "delete")

    # ----------------------------------------------------------------------------------------- templates
    def insert_template(self, request: Request, project: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        message = compute_v1.InstanceTemplate.from_json(json.dumps(request.body))
        self.model.check_allowed(machine_name(message.properties.machine_type))
        with self.model.lock:
            if message.name in self.model.templates:
                raise HttpError(409, f"The resource 'projects/{project}/global/instanceTemplates/{message.name}' "
                                     "already exists")
            self.model.templates[message.name] = FakeTemplate(message.name, request.body)
        return self._operation(self._start(f"projects/{project}/global", message.name), "insert")

    def get_template(self, request: Request, project: str, name: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        template = self._found(self.model.templates.get(name), f"global/instanceTemplates/{name}")
        return _dict(compute_v1.InstanceTemplate.from_json(json.dumps(template.body)))

    def delete_template(self, request: Request, project: str, name: str) -> dict[str, Any]:
        with self.model.lock:
            self._found(self.model.templates.get(name), f"global/instanceTemplates/{name}")
            users = [g.name for g in self.model.groups.values() if g.template == name]
            if users:
                raise HttpError(400, f"The instance_template resource '{name}' is already being used by "
                                     f"'instanceGroupManagers/{users[0]}'")
            self.model.templates.pop(name)
        return self._operation(self._start(f"projects/{project}/global", name), "delete")

    # -------------------------------------------------------------------------------------------- groups
    def insert_group(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        message = compute_v1.InstanceGroupManager.from_json(json.dumps(request.body))
        template = machine_name(message.instance_template)
        policy = machine_name(message.resource_policies.workload_policy) or None
        with self.model.lock:
            if (zone, message.name) in self.model.groups:
                raise HttpError(409, f"The resource 'projects/{project}/zones/{zone}/instanceGroupManagers/"
                                     f"{message.name}' already exists")
            if template not in self.model.templates:
                raise HttpError(400, f"Invalid value for field 'resource.instanceTemplate': "
                                     f"'{message.instance_template}'. The template does not exist.")
            topology = ""
            if policy is not None:
                found = self.model.policies.get((region_of(zone), policy))
                if found is None:
                    raise HttpError(400, f"Invalid value for field 'resource.resourcePolicies.workloadPolicy': "
                                         f"'{message.resource_policies.workload_policy}'. The policy does not exist.")
                topology = found.body.get("workloadPolicy", {}).get("acceleratorTopology", "")
            self.model.groups[(zone, message.name)] = FakeGroup(
                message.name, zone, template, policy, message.target_size, request.body, topology)
        # DONE once the group exists, its VMs or not (as Compute Engine does): listManagedInstances tells the rest
        return self._operation(self._start(f"projects/{project}/zones/{zone}", message.name), "insert")

    def list_groups(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        with self.model.lock:
            items = [self.group_message(g) for (z, _), g in sorted(self.model.groups.items()) if z == zone]
        return _dict(compute_v1.InstanceGroupManagerList(items=items))

    def get_group(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        group = self._group(zone, name)
        return _dict(self.group_message(group))

    def group_message(self, group: FakeGroup) -> Any:
        from google.cloud import compute_v1

        message = compute_v1.InstanceGroupManager.from_json(json.dumps(group.body))
        message.zone = group.zone
        message.target_size = group.target_size
        status = compute_v1.InstanceGroupManagerStatus(is_stable=bool(group.instances))
        if group.topology:
            status.applied_accelerator_topologies = [compute_v1.InstanceGroupManagerStatusAcceleratorTopology(
                accelerator_topology=group.topology, state=group.topology_state)]
        message.status = status
        return message

    def delete_group(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        with self.model.lock:
            group = self._group(zone, name)
            self.model.delete_group(group)
        return self._operation(self._start(f"projects/{project}/zones/{zone}", name), "delete")

    def resize_group(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        size = int(request.query.get("size", "-1"))
        if size < 0:
            raise HttpError(400, "Invalid value for field 'size'")
        with self.model.lock:
            group = self._group(zone, name)
            if size < len(group.instances):
                for instance in group.instances[size:]:
                    self.model.compute.instances.pop((zone, instance), None)
                del group.instances[size:]
            group.target_size = size
        return self._operation(self._start(f"projects/{project}/zones/{zone}", name), "resize")

    def managed_instances(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        with self.model.lock:
            group = self._group(zone, name)
            found = [self.model.compute.instances.get((zone, i)) for i in group.instances]
            items = [compute_v1.ManagedInstance(
                instance=f"projects/{project}/zones/{zone}/instances/{i.name}", name=i.name,
                instance_status=i.status, current_action="NONE") for i in found if i is not None]
            if not group.instances:  # still being made (BULK): one entry per VM to come, with the last failure
                errors = []
                if group.last_error is not None:
                    code, text = group.last_error
                    errors = [compute_v1.Errors(code=code, message=text)]
                attempt = compute_v1.ManagedInstanceLastAttempt(
                    errors=compute_v1.ManagedInstanceLastAttemptErrors(errors=errors))
                items = [compute_v1.ManagedInstance(current_action="CREATING", last_attempt=attempt)
                         for _ in range(group.target_size)]
        return _dict(compute_v1.InstanceGroupManagersListManagedInstancesResponse(managed_instances=items))

    # ---------------------------------------------------------------------------------------- operations
    def _start(self, location: str, target: str) -> FakeOperation:
        return self.model.compute.operations.start(location, target, 0.0, lambda: None)

    def get_region_operation(self, request: Request, project: str, region: str, op: str) -> dict[str, Any]:
        return self._operation(self._known(self.model.compute.operations.get(
            f"projects/{project}/regions/{region}/operations/{op}"), op), "")

    def wait_region_operation(self, request: Request, project: str, region: str, op: str) -> dict[str, Any]:
        return self._operation(self._known(self.model.compute.operations.wait(
            f"projects/{project}/regions/{region}/operations/{op}", at_most=2.0), op), "")

    def get_global_operation(self, request: Request, project: str, op: str) -> dict[str, Any]:
        return self._operation(self._known(self.model.compute.operations.get(
            f"projects/{project}/global/operations/{op}"), op), "")

    def wait_global_operation(self, request: Request, project: str, op: str) -> dict[str, Any]:
        return self._operation(self._known(self.model.compute.operations.wait(
            f"projects/{project}/global/operations/{op}", at_most=2.0), op), "")

    def _operation(self, operation: FakeOperation, kind: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        location, _, name = operation.name.rpartition("/operations/")
        message = compute_v1.Operation(name=name, operation_type=kind, status="DONE" if operation.done else "RUNNING",
                                       target_link=f"{location}/{operation.target}")
        if "/zones/" in location:
            message.zone = location.rsplit("/", 1)[-1]
        elif "/regions/" in location:
            message.region = location.rsplit("/", 1)[-1]
        return _dict(message)

    # ---------------------------------------------------------------------------------------------- misc
    def _group(self, zone: str, name: str) -> FakeGroup:
        return self._found(self.model.groups.get((zone, name)), f"zones/{zone}/instanceGroupManagers/{name}")

    def _found(self, value: Any, path: str) -> Any:
        if value is None:
            raise HttpError(404, f"The resource 'projects/{self.model.compute.project}/{path}' was not found")
        return value

    @staticmethod
    def _known(operation: FakeOperation | None, op: str) -> FakeOperation:
        if operation is None:
            raise HttpError(404, f"operation {op} not found")
        return operation


def _dict(message: Any) -> dict[str, Any]:
    return json.loads(type(message).to_json(message))
