"""Compute Engine TPUs at the wire of the Compute fake: machine types, resource policies, instance templates,
instance group managers (with listManagedInstances and resize) and the region and global operations they start.

Every answer is the library's own message (`compute_v1.X.to_json`), every request is parsed with `from_json`, so the
real InstancesClient, InstanceTemplatesClient, ResourcePoliciesClient and InstanceGroupManagersClient talk to it.
The state and its knobs: tests/fakes/compute_tpu_model.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.fakes.compute import ComputeFake
from tests.fakes.compute_tpu_model import (
    TPU_MACHINE_TYPES,
    FakeGroup,
    FakePolicy,
    FakeTemplate,
    TpuComputeModel,
    machine_name,
    region_of,
)
from tests.fakes.http import HttpError, Request
from tests.fakes.operations import FakeOperation

PROJECT_PATH = r"^/compute/v1/projects/(?P<project>[^/]+)"
ZONE = PROJECT_PATH + r"/zones/(?P<zone>[^/]+)"
REGION = PROJECT_PATH + r"/regions/(?P<region>[^/]+)"
GLOBAL = PROJECT_PATH + r"/global"
__all__ = ["TpuComputeModel", "TpuComputeRoutes"]


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
            group = self._group(zone, name)  # with its VMs, and using its template and policy, until DONE
            return self._operation(self._start(f"projects/{project}/zones/{zone}", name,
                                               lambda: self.model.delete_group(group)), "delete")

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
    def _start(self, location: str, target: str, complete: Callable[[], Any] = lambda: None) -> FakeOperation:
        return self.model.compute.operations.start(location, target, 0.0, complete)

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
