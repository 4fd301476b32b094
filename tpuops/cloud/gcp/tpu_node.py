"""Legacy TPU Nodes through google.cloud.tpu_v1 (gRPC): the TPU host is reached from a client VM."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpuops.cloud.base import HostKey, TpuNode, TpuRequest, Worker, ZoneOffer, has_labels
from tpuops.cloud.gcp.clients import LazyClient
from tpuops.cloud.gcp.errors import none_if_missing
from tpuops.cloud.gcp.listing import list_everywhere, locations, zone_of
from tpuops.cloud.gcp.waiting import Timing
from tpuops.errors import CloudError

API = "tpu"
PAGE_SIZE = 500  # listings in as few round trips as the server allows (it may cap the page)


class TpuNodeApi(LazyClient):
    """TpuApi for mode node. Nodes have no SSH of their own: host keys come from the client VM."""

    def __init__(self, make_client: Callable[[], Any], project: str, timing: Timing) -> None:
        super().__init__(make_client)
        self.project = project
        self.timing = timing

    def get_node(self, zone: str, name: str) -> TpuNode | None:

        call = none_if_missing(lambda: self.client.get_node(name=self._path(zone, name)))

        node = self.timing.call(call, f"get TPU node {name}", API)
        return None if node is None else to_tpu_node(node, zone)

    def list_nodes(self, zone: str) -> list[TpuNode]:
        nodes = self.timing.call(lambda: list(self.client.list_nodes(parent=self._parent(zone))), "list TPU nodes", API)
        return [to_tpu_node(node, zone) for node in nodes]

    def find_nodes(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[TpuNode]:
        nodes = list_everywhere(
            self.timing, API, "list TPU nodes", locations(self.project, zones),
            lambda parent: self.client.list_nodes(parent=parent).pages, lambda page: page.nodes,
        )
        return [to_tpu_node(node, zone_of(node.name)) for node in nodes if has_labels(node.labels, labels)]

    def create_node(self, request: TpuRequest) -> TpuNode:
        from google.cloud import tpu_v1

        what = f"create TPU node {request.name} in {request.zone}"
        node = tpu_v1.Node(
            accelerator_type=request.accelerator_type,
            tensorflow_version=request.runtime,
            network=request.network,
            scheduling_config=tpu_v1.SchedulingConfig(preemptible=request.preemptible or request.spot),
            labels=dict(request.labels),
        )
        from google.api_core import exceptions as gexc

        def create() -> Any:
            try:
                return self.client.create_node(parent=self._parent(request.zone), node_id=request.name, node=node)
            except gexc.AlreadyExists:
                return None  # a retried create whose first attempt got through

        self.timing.create_and_wait(create, what, API)
        created = self.get_node(request.zone, request.name)
        if created is None:
            raise CloudError(f"{what}: the operation finished but the node is not there", "rerun `tpuops up`")
        return created

    def delete_node(self, zone: str, name: str) -> None:

        what = f"delete TPU node {name}"

        call = none_if_missing(lambda: self.client.delete_node(name=self._path(zone, name)))

        operation = self.timing.call(call, what, API)
        if operation is not None:
            self.timing.wait_operation(operation, what, API)

    def host_keys(self, zone: str, name: str) -> list[HostKey]:
        return []

    def zone_offer(self, zone: str) -> ZoneOffer | None:
        """TPU v1 list_accelerator_types and list_tensor_flow_versions of the zone, None for an unknown zone."""
        from google.api_core import exceptions as gexc

        page = {"parent": self._parent(zone), "page_size": PAGE_SIZE}

        def listing() -> ZoneOffer | None:
            try:
                types = tuple(item.type_ for item in self.client.list_accelerator_types(request=page))
                versions = tuple(item.version for item in self.client.list_tensor_flow_versions(request=page))
            except gexc.NotFound:
                return None
            return ZoneOffer(zone, "node", types, versions)

        return self.timing.call(listing, f"list the TPU Node types and versions of zone {zone}", API)

    def _parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def _path(self, zone: str, name: str) -> str:
        return f"{self._parent(zone)}/nodes/{name}"


def to_tpu_node(node: Any, zone: str) -> TpuNode:
    workers = tuple(
        Worker(index=index, internal_ip=endpoint.ip_address) for index, endpoint in enumerate(node.network_endpoints)
    )
    return TpuNode(
        name=node.name.rsplit("/", 1)[-1],
        zone=zone,
        accelerator_type=node.accelerator_type,
        state=node.state.name,
        mode="node",
        health=node.health.name if node.health else None,
        runtime=node.tensorflow_version or None,
        workers=workers,
        service_account=node.service_account or None,
        labels=dict(node.labels),
    )
