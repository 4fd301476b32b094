"""State model of the Cloud TPU API (nodes, legacy nodes, queued resources), apart from any wire format."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tests.fakes.operations import CAPACITY_MESSAGE, FakeOperation, OperationFailed, Operations

PROJECT_NUMBER = "123456789012"
RESOURCE_EXHAUSTED = 8
NOT_FOUND = 5
ALREADY_EXISTS = 6
UNAVAILABLE = 14
EVERY_ZONE = "-"  # the location that lists every zone of the project
EXPIRED_MESSAGE = "The queued resource was not provisioned before its valid_until time."


def hosts_of(accelerator_type: str) -> int:
    from tpuops import catalog

    info = catalog.load().accelerator(accelerator_type)
    return info.hosts if info else 1


def default_external_ip(zone: str, name: str, index: int) -> str:
    return f"127.0.0.{10 + index}"  # loopback: nothing in the tests may reach a real address


def default_internal_ip(zone: str, name: str, index: int) -> str:
    return f"10.130.0.{2 + index}"


def fake_host_key(name: str, index: int) -> list[tuple[str, str]]:
    import base64

    body = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + f"{name}-{index}".encode().ljust(32, b"k"))
    return [("ssh-ed25519", body.decode())]


@dataclass
class FakeNode:
    name: str
    zone: str
    accelerator_type: str
    runtime: str
    mode: str  # "vm" (tpu v2) or "node" (legacy, tpu v1)
    state: str = "CREATING"
    health: str = "HEALTHY"
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    service_account: str = ""
    preemptible: bool = False
    spot: bool = False
    network: str = "default"
    external_ips: bool = False
    workers: list[tuple[str, str | None]] = field(default_factory=list)  # (internal, external)


@dataclass
class FakeQueued:
    name: str
    zone: str
    node: FakeNode
    state: str = "ACCEPTED"
    active_at: float = 0.0
    spot: bool = False
    error: str = ""
    valid_until: float | None = None  # seconds, as the request's queueing_policy.valid_until_duration said
    created_at: float = 0.0  # wall-clock time it was queued (create_time)
    deadline: float | None = None  # monotonic time after which it is FAILED unless granted
    node_count: int = 1  # Multislice: `node` is the spec of `node_count` nodes named `node_prefix-0..N-1`
    node_prefix: str = ""
    reservation: str = ""  # reservation_name, as the request gave it

    @property
    def multislice(self) -> bool:
        return self.node_count > 1

    def node_names(self) -> list[str]:
        if not self.multislice:
            return [self.node.name]
        return [f"{self.node_prefix}-{index}" for index in range(self.node_count)]

    def new_nodes(self) -> list[FakeNode]:
        """The nodes granted to it: the node itself, or one copy of the node spec per slice."""
        if not self.multislice:
            return [self.node]
        return [replace(self.node, name=name, labels=dict(self.node.labels), metadata=dict(self.node.metadata),
                        workers=[]) for name in self.node_names()]


@dataclass
class ZoneListing:
    """What one zone lists: TPU v2 accelerator types and runtime versions; TPU v1 (legacy Node) types and
    TensorFlow versions."""

    accelerator_types: list[str]
    runtimes: list[str]
    node_types: list[str]
    node_versions: list[str]


def catalog_listing() -> ZoneListing:
    """Every type and runtime of the catalog: what a zone lists unless a test says otherwise."""
    from tpuops import catalog

    cat = catalog.load()
    nodes = [g for g in cat.generations.values() if g.node_supported]
    return ZoneListing(
        accelerator_types=cat.all_types(),
        runtimes=sorted({r for g in cat.generations.values() for r in g.vm_runtimes}),
        node_types=[t for g in nodes for t in g.types()],
        node_versions=sorted({r for g in nodes for r in g.node_runtimes}),
    )


class TpuModel:
    """Nodes, legacy nodes and queued resources of one project; knobs for latency and faults."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.lock = threading.RLock()
        self.operations = Operations(self.lock, "operation")
        self.nodes: dict[tuple[str, str], FakeNode] = {}
        self.queued: dict[tuple[str, str], FakeQueued] = {}
        # Latency knobs (seconds an operation takes) and fault knobs.
        self.create_seconds = 0.0
        self.delete_seconds = 0.0
        self.queued_seconds = 0.0
        # Google marks a Multislice request SUSPENDED when a slice is lost, though not necessarily at once:
        # False keeps it ACTIVE meanwhile (a watcher must then notice the lost slice's node itself).
        self.suspend_on_lost_slice = True
        self.capacity_failures: dict[str, int] = {}  # zone -> creates that fail for lack of capacity (-1: all)
        self.queued_failures: dict[str, int] = {}  # zone -> queued resources that end FAILED
        self.transient_failures: dict[str, int] = {}  # zone -> creates whose operation fails UNAVAILABLE
        self.unreachable_zones: set[str] = set()  # zones a list over every zone (location `-`) cannot reach
        self.external_ip: Callable[[str, str, int], str] = default_external_ip
        self.internal_ip: Callable[[str, str, int], str] = default_internal_ip
        self.host_keys: Callable[[str, int], list[tuple[str, str]]] = fake_host_key
        # What zones list (list_accelerator_types, list_runtime_versions, list_tensor_flow_versions): a zone
        # not set here lists the whole catalog; a zone in `unknown_zones` answers NOT_FOUND.
        self.listings: dict[str, ZoneListing] = {}
        self.unknown_zones: set[str] = set()
        self.listing_page_size = 20  # the most a listing page holds, whatever page size was asked for

    # -------------------------------------------------------------------------------------- listings
    def listing(self, zone: str) -> ZoneListing | None:
        with self.lock:
            if zone in self.unknown_zones:
                return None
            return self.listings.get(zone) or catalog_listing()

    def page(self, items: list[str], token: str, size: int = 0) -> tuple[list[str], str]:
        """One page of a listing and the next page's token ("" after the last)."""
        start = int(token or 0)
        end = start + min(size or self.listing_page_size, self.listing_page_size)
        return items[start:end], (str(end) if end < len(items) else "")

    # ------------------------------------------------------------------------------------------ nodes
    def node_service_account(self, node: FakeNode) -> str:
        if node.mode == "node":
            return f"service-{PROJECT_NUMBER}@cloud-tpu.iam.gserviceaccount.com"
        return node.service_account or f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"

    def get_node(self, zone: str, name: str, mode: str) -> FakeNode | None:
        with self.lock:
            node = self.nodes.get((zone, name))
            return node if node is not None and node.mode == mode else None

    def list_nodes(self, zone: str, mode: str) -> list[FakeNode]:
        with self.lock:
            return [n for (z, _), n in sorted(self.nodes.items()) if self._listed(z, zone) and n.mode == mode]

    def _listed(self, zone: str, asked: str) -> bool:
        return zone == asked or (asked == EVERY_ZONE and zone not in self.unreachable_zones)

    def unreachable(self, asked: str) -> list[str]:
        """The locations a list over `asked` names as unreachable (only the every-zone list has any)."""
        if asked != EVERY_ZONE:
            return []
        return [f"projects/{self.project}/locations/{zone}" for zone in sorted(self.unreachable_zones)]

    def create_node(self, node: FakeNode) -> FakeOperation:
        with self.lock:
            key = (node.zone, node.name)
            if key in self.nodes:
                raise OperationFailed(ALREADY_EXISTS, f"node {node.name} already exists")
            node.state = "CREATING"
            node.service_account = node.service_account if node.mode == "vm" else ""
            self.nodes[key] = node
            location = f"projects/{self.project}/locations/{node.zone}"
            return self.operations.start(location, node.name, self.create_seconds, lambda: self._provision(node))

    def _provision(self, node: FakeNode) -> FakeNode:
        if self._use_up(self.transient_failures, node.zone):
            self.nodes.pop((node.zone, node.name), None)
            raise OperationFailed(UNAVAILABLE, "The service is currently unavailable.")
        if self._use_up(self.capacity_failures, node.zone):
            self.nodes.pop((node.zone, node.name), None)
            raise OperationFailed(RESOURCE_EXHAUSTED, CAPACITY_MESSAGE.format(zone=node.zone))
        node.workers = [
            (self.internal_ip(node.zone, node.name, i), self.external_ip(node.zone, node.name, i))
            for i in range(hosts_of(node.accelerator_type))
        ]
        node.state, node.health = "READY", "HEALTHY"
        return node

    def delete_node(self, zone: str, name: str, mode: str) -> FakeOperation | None:
        with self.lock:
            node = self.get_node(zone, name, mode)
            if node is None:
                return None
            node.state = "DELETING"
            location = f"projects/{self.project}/locations/{zone}"
            return self.operations.start(
                location, name, self.delete_seconds, lambda: self._remove(zone, name), verb="delete"
            )

    def _remove(self, zone: str, name: str) -> FakeNode | None:
        return self.nodes.pop((zone, name), None)

    def preempt(self, zone: str, name: str) -> None:
        with self.lock:
            node = self.nodes[(zone, name)]
            assert node.state == "READY", f"only a READY node can be preempted, {name} is {node.state}"
            node.state, node.health = "PREEMPTED", "HEALTH_UNSPECIFIED"

    def lose_worker(self, zone: str, name: str, index: int) -> None:
        """A worker's host went away: the node turns unhealthy and the worker has no address."""
        with self.lock:
            node = self.nodes[(zone, name)]
            internal, _ = node.workers[index]
            node.workers[index] = (internal, None)
            node.health = "UNHEALTHY_MAINTENANCE"

    # ------------------------------------------------------------------------------- queued resources
    def get_queued(self, zone: str, name: str) -> FakeQueued | None:
        with self.lock:
            queued = self.queued.get((zone, name))
            if queued is not None:
                self._advance_queued(queued)
            return queued

    def list_queued(self, zone: str) -> list[FakeQueued]:
        with self.lock:
            found = [q for (z, _), q in sorted(self.queued.items()) if self._listed(z, zone)]
            for queued in found:
                self._advance_queued(queued)
            return found

    def create_queued(self, queued: FakeQueued) -> FakeOperation:
        with self.lock:
            key = (queued.zone, queued.name)
            if key in self.queued:
                raise OperationFailed(ALREADY_EXISTS, f"queued resource {queued.name} already exists")
            queued.state = "ACCEPTED"
            queued.active_at = time.monotonic() + self.queued_seconds
            queued.created_at = time.time()
            if queued.valid_until is not None:
                queued.deadline = time.monotonic() + queued.valid_until
            self.queued[key] = queued
            location = f"projects/{self.project}/locations/{queued.zone}"
            return self.operations.start(location, queued.name, 0, lambda: queued)

    def _advance_queued(self, queued: FakeQueued) -> None:
        if queued.state == "ACTIVE" and queued.multislice and self.suspend_on_lost_slice and \
                self._a_slice_is_lost(queued):
            queued.state = "SUSPENDED"  # as Google: Multislice cannot go on with a slice missing
            return
        if queued.state != "ACCEPTED":
            return
        now = time.monotonic()
        if queued.deadline is not None and now >= queued.deadline and queued.active_at > queued.deadline:
            queued.state, queued.error = "FAILED", EXPIRED_MESSAGE  # as Google: not granted in time, dropped
            return
        if now < queued.active_at:
            return
        if self._use_up(self.queued_failures, queued.zone):
            queued.state, queued.error = "FAILED", CAPACITY_MESSAGE.format(zone=queued.zone)
            return
        for node in queued.new_nodes():
            node.state = "CREATING"
            self.nodes[(node.zone, node.name)] = node
            self._provision(node)
        queued.state = "ACTIVE"

    def _a_slice_is_lost(self, queued: FakeQueued) -> bool:
        nodes = [self.nodes.get((queued.zone, name)) for name in queued.node_names()]
        return any(node is None or node.state == "PREEMPTED" for node in nodes)

    def delete_queued(self, zone: str, name: str, force: bool) -> FakeOperation | None:
        with self.lock:
            queued = self.get_queued(zone, name)
            if queued is None:
                return None
            held = [node for node in queued.node_names() if (zone, node) in self.nodes]
            if held and not force:
                raise OperationFailed(9, f"queued resource {name} still has node {held[0]}: delete with force")
            queued.state = "DELETING"
            location = f"projects/{self.project}/locations/{zone}"

            def remove() -> None:
                for node in queued.node_names():
                    self.nodes.pop((zone, node), None)
                self.queued.pop((zone, name), None)

            return self.operations.start(location, name, self.delete_seconds, remove, verb="delete")

    def suspend_queued(self, zone: str, name: str) -> None:
        with self.lock:
            queued = self.get_queued(zone, name)
            assert queued is not None
            queued.state = "SUSPENDED"
            for node in queued.node_names():
                self.nodes.pop((zone, node), None)

    @staticmethod
    def _use_up(counters: dict[str, int], zone: str) -> bool:
        left = counters.get(zone, 0)
        if left == 0:
            return False
        if left > 0:
            counters[zone] = left - 1
        return True
