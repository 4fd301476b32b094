"""Compute Engine REST fake (instances, zone operations, projects.get, firewalls.list), with its state model."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.http import HttpError, JsonServer, Request, dispatch
from tests.fakes.operations import FakeOperation, OperationFailed, Operations
from tests.fakes.tpu_model import PROJECT_NUMBER, fake_host_key

ZONE = r"^/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)"
VM_CAPACITY_CODE = "ZONE_RESOURCE_POOL_EXHAUSTED"
# One term of Compute's filter syntax that the fake understands: labels.KEY = "VALUE" (quotes optional).
LABEL_TERM = re.compile(r'\(?\s*labels\.(?P<key>[a-z0-9_-]+)\s*=\s*"?(?P<value>[a-z0-9_-]*)"?\s*\)?')
# Or one regular-expression term (the other kind of Compute filter; the two do not mix): name eq "REGEX", the
# expression matching the whole name.
NAME_TERM = re.compile(r'^\s*name\s+eq\s+"(?P<regex>[^"]*)"\s*$')


@dataclass
class FakeInstance:
    name: str
    zone: str
    machine_type: str
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    status: str = "PROVISIONING"
    internal_ip: str = ""
    external_ip: str | None = None
    wants_external_ip: bool = False
    service_accounts: dict[str, list[str]] = field(default_factory=dict)  # email -> scopes, as inserted
    tags: list[str] = field(default_factory=list)
    scheduling: dict[str, Any] = field(default_factory=dict)  # the Scheduling message as JSON, as inserted
    group: str | None = None  # the managed instance group that made it (its `created-by` metadata)


@dataclass
class FakeFirewall:
    """An allow rule as the API stores it: `allowed` is [(protocol, [ports])]."""

    name: str
    network: str = "default"
    allowed: list[tuple[str, list[str]]] = field(default_factory=lambda: [("tcp", ["22"])])
    source_ranges: list[str] = field(default_factory=list)
    source_tags: list[str] = field(default_factory=list)
    target_tags: list[str] = field(default_factory=list)
    direction: str = "INGRESS"
    disabled: bool = False


# The rules Google creates with a project's `default` network (auto mode).
DEFAULT_NETWORK_RULES = (
    FakeFirewall("default-allow-internal", allowed=[("tcp", ["0-65535"]), ("udp", ["0-65535"]), ("icmp", [])],
                 source_ranges=["10.128.0.0/9"]),
    FakeFirewall("default-allow-ssh", source_ranges=["0.0.0.0/0"]),
)


class ComputeModel:
    def __init__(self, project: str) -> None:
        self.project = project
        self.lock = threading.RLock()
        # RUNNING when inserted or deleted, DONE at the second read: the clients' waits always wait
        self.operations = Operations(self.lock, "operation", running_reads=1)
        self.instances: dict[tuple[str, str], FakeInstance] = {}
        self.firewalls: dict[str, FakeFirewall] = {rule.name: rule for rule in DEFAULT_NETWORK_RULES}
        self.create_seconds = 0.0
        self.delete_seconds = 0.0
        self.capacity_failures: dict[str, int] = {}
        self.transient_failures: dict[str, int] = {}  # zone -> inserts whose operation fails with HTTP 503
        self.default_service_account = f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
        self._numbers = itertools.count(0)
        self.external_ip: Callable[[str, int], str] = lambda name, n: f"127.0.0.{50 + n}"
        self.host_keys: Callable[[str], list[tuple[str, str]]] = lambda name: fake_host_key(name, 0)

    def insert(self, instance: FakeInstance) -> FakeOperation:
        with self.lock:
            if (instance.zone, instance.name) in self.instances:
                raise OperationFailed(
                    6,
                    f"The resource 'projects/{self.project}/zones/{instance.zone}/instances/"
                    f"{instance.name}' already exists",
                )
            self.instances[(instance.zone, instance.name)] = instance
            location = f"projects/{self.project}/zones/{instance.zone}"
            return self.operations.start(location, instance.name, self.create_seconds, lambda: self._boot(instance))

    def _boot(self, instance: FakeInstance) -> None:
        if self.transient_failures.get(instance.zone, 0) > 0:
            self.transient_failures[instance.zone] -= 1
            self.instances.pop((instance.zone, instance.name), None)
            raise OperationFailed(503, "SERVICE_UNAVAILABLE: The service is currently unavailable")
        left = self.capacity_failures.get(instance.zone, 0)
        if left:
            self.capacity_failures[instance.zone] = left - 1 if left > 0 else left
            self.instances.pop((instance.zone, instance.name), None)
            raise OperationFailed(503, f"{VM_CAPACITY_CODE}: The zone does not have enough resources available")
        number = next(self._numbers)
        instance.internal_ip = f"10.140.0.{2 + number}"
        instance.external_ip = self.external_ip(instance.name, number) if instance.wants_external_ip else None
        instance.status = "RUNNING"

    def start(self, zone: str, name: str) -> FakeOperation | None:
        with self.lock:
            instance = self.instances.get((zone, name))
            if instance is None:
                return None
            location = f"projects/{self.project}/zones/{zone}"
            return self.operations.start(location, name, self.create_seconds,
                                         lambda: setattr(instance, "status", "RUNNING"))

    def delete(self, zone: str, name: str) -> FakeOperation | None:
        with self.lock:
            instance = self.instances.get((zone, name))
            if instance is None:
                return None
            instance.status = "STOPPING"
            location = f"projects/{self.project}/zones/{zone}"
            return self.operations.start(
                location, name, self.delete_seconds, lambda: self.instances.pop((zone, name), None)
            )


class ComputeFake:
    def __init__(self, model: ComputeModel) -> None:
        self.model = model
        self.tpu_checks: Callable[[FakeInstance], None] | None = None  # set by tests.fakes.compute_tpus
        self.server = JsonServer(self.handle, "compute")
        self.routes = [
            ("GET", r"^/compute/v1/projects/(?P<project>[^/]+)$", self.get_project),
            ("POST", ZONE + r"/instances$", self.insert),
            ("GET", ZONE + r"/instances$", self.list),
            ("GET", r"^/compute/v1/projects/(?P<project>[^/]+)/aggregated/instances$", self.aggregated_list),
            ("GET", ZONE + r"/instances/(?P<name>[^/]+)$", self.get),
            ("DELETE", ZONE + r"/instances/(?P<name>[^/]+)$", self.delete),
            ("POST", ZONE + r"/instances/(?P<name>[^/]+)/start$", self.start_instance),
            ("GET", ZONE + r"/instances/(?P<name>[^/]+)/getGuestAttributes$", self.guest_attributes),
            ("GET", ZONE + r"/operations/(?P<op>[^/]+)$", self.get_operation),
            ("GET", r"^/compute/v1/projects/(?P<project>[^/]+)/global/firewalls$", self.list_firewalls),
            ("POST", ZONE + r"/operations/(?P<op>[^/]+)/wait$", self.wait_operation),
        ]

    def handle(self, request: Request) -> tuple[int, Any]:
        self.model.operations.advance_due()
        return dispatch("compute", self.routes, request, _operation_error)

    def get_project(self, request: Request, project: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        message = compute_v1.Project(
            name=project, id=int(PROJECT_NUMBER), default_service_account=self.model.default_service_account
        )
        return _dict(message)

    def insert(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        message = compute_v1.Instance.from_json(_json(request.body), ignore_unknown_fields=True)
        if not message.name:  # as the API answers an instance without a name
            raise HttpError(400, "Invalid value for field 'resource.name': ''. Must be a match of regex "
                                 "'[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
        interfaces = list(message.network_interfaces)
        instance = FakeInstance(
            name=message.name,
            zone=zone,
            machine_type=message.machine_type,
            labels=dict(message.labels),
            metadata={item.key: item.value for item in message.metadata.items},
            wants_external_ip=bool(interfaces and list(interfaces[0].access_configs)),
            # "default" is resolved to the project's Compute default account, as the API does
            service_accounts={self.model.default_service_account if account.email == "default" else account.email:
                              list(account.scopes) for account in message.service_accounts},
            tags=list(message.tags.items),
            scheduling=_dict(message.scheduling) if "scheduling" in message else {},
        )
        if self.tpu_checks is not None:
            self.tpu_checks(instance)  # a TPU machine type: allowlist, metadata Compute Engine writes
        return self._operation(self.model.insert(instance), "insert")

    def list(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        expression = request.query.get("filter", "")
        named = NAME_TERM.match(expression)
        wanted = {} if named else label_filter(expression)
        with self.model.lock:
            items = [
                self.instance_message(i)
                for (z, _), i in sorted(self.model.instances.items())
                if z == zone and _carries(i.labels, wanted) and (named is None or re.fullmatch(named["regex"], i.name))
            ]
        return _dict(compute_v1.InstanceList(items=items))

    def aggregated_list(self, request: Request, project: str) -> dict[str, Any]:
        """instances.aggregatedList: every zone's instances matching the filter, keyed by "zones/ZONE"."""
        from google.cloud import compute_v1

        wanted = label_filter(request.query.get("filter", ""))
        scopes: dict[str, list[Any]] = {}
        with self.model.lock:
            for (zone, _), instance in sorted(self.model.instances.items()):
                if _carries(instance.labels, wanted):
                    scopes.setdefault(f"zones/{zone}", []).append(self.instance_message(instance))
        items = {scope: compute_v1.InstancesScopedList(instances=found) for scope, found in scopes.items()}
        return _dict(compute_v1.InstanceAggregatedList(items=items))

    def list_firewalls(self, request: Request, project: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        with self.model.lock:
            rules = [self.firewall_message(rule) for _, rule in sorted(self.model.firewalls.items())]
        return _dict(compute_v1.FirewallList(items=rules))

    def firewall_message(self, rule: FakeFirewall) -> Any:
        from google.cloud import compute_v1

        return compute_v1.Firewall(
            name=rule.name,
            network=f"https://www.googleapis.com/compute/v1/projects/{self.model.project}/global/networks/{rule.network}",
            direction=rule.direction,
            disabled=rule.disabled,
            allowed=[compute_v1.Allowed(I_p_protocol=protocol, ports=ports) for protocol, ports in rule.allowed],
            source_ranges=rule.source_ranges,
            source_tags=rule.source_tags,
            target_tags=rule.target_tags,
        )

    def get(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        return _dict(self.instance_message(self._instance(zone, name)))

    def delete(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        operation = self.model.delete(zone, name)
        if operation is None:
            raise HttpError(404, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found")
        return self._operation(operation, "delete")

    def start_instance(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        operation = self.model.start(zone, name)
        if operation is None:
            raise HttpError(404, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found")
        return self._operation(operation, "start")

    def guest_attributes(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        self._instance(zone, name)
        items = [
            compute_v1.GuestAttributesEntry(namespace="hostkeys", key=key_type, value=key)
            for key_type, key in self.model.host_keys(name)
        ]
        message = compute_v1.GuestAttributes(
            query_path=request.query.get("queryPath", ""), query_value=compute_v1.GuestAttributesValue(items=items)
        )
        return _dict(message)

    def get_operation(self, request: Request, project: str, zone: str, op: str) -> dict[str, Any]:
        operation = self.model.operations.get(f"projects/{project}/zones/{zone}/operations/{op}")
        if operation is None:
            raise HttpError(404, f"operation {op} not found")
        return self._operation(operation, "")

    def wait_operation(self, request: Request, project: str, zone: str, op: str) -> dict[str, Any]:
        operation = self.model.operations.wait(f"projects/{project}/zones/{zone}/operations/{op}", at_most=2.0)
        if operation is None:
            raise HttpError(404, f"operation {op} not found")
        return self._operation(operation, "")

    def _instance(self, zone: str, name: str) -> FakeInstance:
        with self.model.lock:
            instance = self.model.instances.get((zone, name))
        if instance is None:
            raise HttpError(
                404, f"The resource 'projects/{self.model.project}/zones/{zone}/instances/{name}' was not found"
            )
        return instance

    def instance_message(self, instance: FakeInstance) -> Any:
        from google.cloud import compute_v1

        access = [compute_v1.AccessConfig(name="External NAT", nat_i_p=instance.external_ip or "")]
        interface = compute_v1.NetworkInterface(
            network_i_p=instance.internal_ip, access_configs=access if instance.wants_external_ip else []
        )
        return compute_v1.Instance(
            name=instance.name,
            zone=instance.zone,
            machine_type=instance.machine_type,
            status=instance.status,
            labels=instance.labels,
            service_accounts=[compute_v1.ServiceAccount(email=email, scopes=scopes)
                              for email, scopes in instance.service_accounts.items()],
            tags=compute_v1.Tags(items=instance.tags),
            scheduling=compute_v1.Scheduling.from_json(_json(instance.scheduling), ignore_unknown_fields=True),
            metadata=compute_v1.Metadata(
                items=[compute_v1.Items(key=k, value=v) for k, v in instance.metadata.items()]
            ),
            network_interfaces=[interface],
        )

    def _operation(self, operation: FakeOperation, kind: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        name = operation.name.rsplit("/", 1)[-1]
        zone = operation.name.split("/zones/")[1].split("/")[0]
        message = compute_v1.Operation(
            name=name,
            zone=zone,
            operation_type=kind,
            target_link=f"projects/{self.model.project}/zones/{zone}/instances/{operation.target}",
            status="DONE" if operation.done else "RUNNING",
        )
        if operation.error is not None:
            code, _, text = operation.error.message.partition(": ")
            message.error = compute_v1.Error(errors=[compute_v1.Errors(code=code, message=text)])
            message.http_error_status_code = operation.error.code
        return _dict(message)


def label_filter(expression: str) -> dict[str, str]:
    """The labels a filter asks for; anything else in it is refused, as the real API refuses a bad filter."""
    wanted: dict[str, str] = {}
    rest = expression
    for match in LABEL_TERM.finditer(expression):
        wanted[match["key"]] = match["value"]
        rest = rest.replace(match.group(0), "", 1)
    if rest.strip():
        raise HttpError(400, f"Invalid value for field 'filter': '{expression}'. Invalid list filter expression.")
    return wanted


def _carries(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in wanted.items())


def _dict(message: Any) -> dict[str, Any]:
    import json

    return json.loads(type(message).to_json(message))


def _json(body: dict[str, Any]) -> str:
    import json

    return json.dumps(body)


def _operation_error(err: Exception) -> HttpError | None:
    if isinstance(err, OperationFailed):
        return HttpError(409 if err.code == 6 else 400, err.message)  # 6: ALREADY_EXISTS
    return None
