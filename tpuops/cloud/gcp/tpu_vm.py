"""TPU VMs, pod slices and queued resources through google.cloud.tpu_v2 (REST transport)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpuops.cloud.base import HostKey, QueuedResource, TpuNode, TpuRequest, Worker, ZoneOffer, has_labels
from tpuops.cloud.gcp.clients import LazyClient
from tpuops.cloud.gcp.errors import none_if_missing
from tpuops.cloud.gcp.listing import list_everywhere, locations, zone_of
from tpuops.cloud.gcp.waiting import Timing
from tpuops.durations import format_duration
from tpuops.errors import CapacityError, CloudError

API = "tpu"
PAGE_SIZE = 500  # listings in as few round trips as the server allows (it may cap the page)
ACTIVE_QUEUED = "ACTIVE"
FAILED_QUEUED = ("FAILED", "SUSPENDED")


class TpuVmApi(LazyClient):
    """TpuApi for TPU VMs (mode vm) and QueuedResourceApi, over one tpu_v2.TpuClient."""

    def __init__(self, make_client: Callable[[], Any], project: str, timing: Timing) -> None:
        super().__init__(make_client)
        self.project = project
        self.timing = timing

    # ---------------------------------------------------------------------------------------- nodes
    def get_node(self, zone: str, name: str) -> TpuNode | None:
        node = self._get_or_none(lambda: self.client.get_node(name=self._node_path(zone, name)), f"get TPU {name}")
        return None if node is None else to_tpu_node(node, zone)

    def list_nodes(self, zone: str) -> list[TpuNode]:
        pager = self.timing.call(lambda: list(self.client.list_nodes(parent=self._parent(zone))), "list TPUs", API)
        return [to_tpu_node(node, zone) for node in pager]

    def find_nodes(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[TpuNode]:
        nodes = list_everywhere(
            self.timing, API, "list TPU VMs", locations(self.project, zones),
            lambda parent: self.client.list_nodes(parent=parent).pages, lambda page: page.nodes,
        )
        return [to_tpu_node(node, zone_of(node.name)) for node in nodes if has_labels(node.labels, labels)]

    def create_node(self, request: TpuRequest) -> TpuNode:
        from google.api_core import exceptions as gexc

        what = f"create TPU {request.name} in {request.zone}"

        def create() -> Any:
            try:
                return self.client.create_node(
                    parent=self._parent(request.zone), node_id=request.name, node=node_message(request)
                )
            except gexc.Conflict:
                return None  # a retried create whose first attempt got through: wait for the node below

        self.timing.create_and_wait(create, what, API)
        return self.timing.poll_until(lambda: self._settled(request.zone, request.name, what), what)

    def _settled(self, zone: str, name: str, what: str) -> TpuNode | None:
        """The node once it is past CREATING (None while it is not)."""
        node = self.get_node(zone, name)
        if node is None:
            raise CloudError(f"{what}: the operation finished but the TPU is not there", "rerun `tpuops up`")
        return None if node.state == "CREATING" else node

    def delete_node(self, zone: str, name: str) -> None:
        what = f"delete TPU {name}"
        operation = self._get_or_none(lambda: self.client.delete_node(name=self._node_path(zone, name)), what)
        if operation is not None:
            self.timing.wait_operation(operation, what, API)

    def host_keys(self, zone: str, name: str) -> list[HostKey]:
        response = self.timing.call(
            lambda: self.client.get_guest_attributes(
                request={"name": self._node_path(zone, name), "query_path": "hostkeys/"}
            ),
            f"read host keys of TPU {name}",
            API,
        )
        return [
            HostKey(worker=index, key_type=item.key, key=item.value.strip())
            for index, attributes in enumerate(response.guest_attributes)
            for item in attributes.query_value.items
            if item.namespace == "hostkeys" and item.value
        ]

    def zone_offer(self, zone: str) -> ZoneOffer | None:
        """list_accelerator_types and list_runtime_versions of the zone (every page), None for an unknown zone."""
        from google.api_core import exceptions as gexc

        page = {"parent": self._parent(zone), "page_size": PAGE_SIZE}

        def listing() -> ZoneOffer | None:
            try:
                types = tuple(item.type_ for item in self.client.list_accelerator_types(request=page))
                runtimes = tuple(item.version for item in self.client.list_runtime_versions(request=page))
            except gexc.NotFound:
                return None
            return ZoneOffer(zone, "vm", types, runtimes)

        return self.timing.call(listing, f"list the TPU types and runtimes of zone {zone}", API)

    # ------------------------------------------------------------------------------- queued resources
    def get_queued(self, zone: str, name: str) -> QueuedResource | None:
        found = self._get_or_none(
            lambda: self.client.get_queued_resource(name=self._queued_path(zone, name)), f"get queued resource {name}"
        )
        return None if found is None else to_queued(found, zone)

    def list_queued(self, zone: str) -> list[QueuedResource]:
        items = self.timing.call(
            lambda: list(self.client.list_queued_resources(parent=self._parent(zone))), "list queued resources", API
        )
        return [to_queued(item, zone) for item in items]

    def find_queued(self, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[QueuedResource]:
        items = list_everywhere(
            self.timing, API, "list queued resources", locations(self.project, zones),
            lambda parent: self.client.list_queued_resources(parent=parent).pages, lambda page: page.queued_resources,
        )
        found = (to_queued(item, zone_of(item.name)) for item in items)
        return [queued for queued in found if has_labels(queued.labels, labels)]

    def create_queued(self, name: str, request: TpuRequest, wait_seconds: float,
                      valid_until: float | None = None) -> QueuedResource:
        from google.cloud import tpu_v2

        what = f"create queued resource {name} in {request.zone}"
        node = node_message(request)
        node.scheduling_config = None  # a queued resource carries spot itself
        queued = tpu_v2.QueuedResource(
            tpu=tpu_v2.QueuedResource.Tpu(node_spec=[node_spec(self._parent(request.zone), request, node)]),
        )
        if request.spot or request.preemptible:
            queued.spot = tpu_v2.QueuedResource.Spot()
        if request.reservation:  # the one reservation field google-cloud-tpu's v2 QueuedResource has
            queued.reservation_name = request.reservation
        if valid_until is not None:
            queued.queueing_policy = queueing_policy(valid_until)
        operation = self.timing.call(
            lambda: self.client.create_queued_resource(
                parent=self._parent(request.zone), queued_resource_id=name, queued_resource=queued
            ),
            what,
            API,
        )
        self.timing.wait_operation(operation, what, API)

        def not_granted() -> CapacityError:  # the wait ran out with the request still waiting: no capacity then
            return CapacityError(f"queued resource {name} was not granted within {format_duration(wait_seconds)}",
                                 "rerun with a longer --wait-for-capacity, or add zones to tpu.zones")

        return self.timing.poll_until(lambda: self._active_or_none(request.zone, name), what, wait_seconds,
                                      timed_out=not_granted)

    def delete_queued(self, zone: str, name: str) -> None:
        what = f"delete queued resource {name}"
        operation = self._get_or_none(
            lambda: self.client.delete_queued_resource(request={"name": self._queued_path(zone, name), "force": True}),
            what,
        )
        if operation is not None:
            self.timing.wait_operation(operation, what, API)

    def _active_or_none(self, zone: str, name: str) -> QueuedResource | None:
        queued = self.get_queued(zone, name)
        if queued is None:
            raise CloudError(f"queued resource {name} disappeared while waiting", "rerun `tpuops up`")
        if queued.state in FAILED_QUEUED:
            raise CapacityError(
                f"queued resource {name} is {queued.state}: {queued.detail or 'no reason given'}",
                "try another zone, or rerun `tpuops up` to queue again",
            )
        return queued if queued.state == ACTIVE_QUEUED else None

    # ---------------------------------------------------------------------------------------- paths
    def _parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def _node_path(self, zone: str, name: str) -> str:
        return f"{self._parent(zone)}/nodes/{name}"

    def _queued_path(self, zone: str, name: str) -> str:
        return f"{self._parent(zone)}/queuedResources/{name}"

    def _get_or_none(self, fn: Any, what: str) -> Any:

        call = none_if_missing(fn)

        return self.timing.call(call, what, API)


CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def node_message(request: TpuRequest) -> Any:
    from google.cloud import tpu_v2

    node = tpu_v2.Node(
        accelerator_type=request.accelerator_type,
        runtime_version=request.runtime,
        network_config=tpu_v2.NetworkConfig(
            network=request.network, subnetwork=request.subnetwork or "", enable_external_ips=True
        ),
        scheduling_config=tpu_v2.SchedulingConfig(preemptible=request.preemptible, spot=request.spot),
        labels=dict(request.labels),
        metadata={"ssh-keys": request.ssh_keys} if request.ssh_keys else {},
    )
    # The cloud-platform scope on the TPU's service account (the default one when email is empty): the trainer
    # reads and writes the bucket with it, and the autostop agent deletes its own TPU with its token.
    node.service_account = tpu_v2.ServiceAccount(email=request.service_account or "", scope=[CLOUD_PLATFORM])
    return node


def queueing_policy(valid_until: float) -> Any:
    """Google drops the request (FAILED) when it is not granted within `valid_until` seconds; sent as whole
    seconds, rounded up, so the request never ends before the wait it was made for."""
    from google.cloud import tpu_v2
    from google.protobuf import duration_pb2

    seconds = max(1, math.ceil(valid_until))
    return tpu_v2.QueuedResource.QueueingPolicy(valid_until_duration=duration_pb2.Duration(seconds=seconds))


def to_tpu_node(node: Any, zone: str) -> TpuNode:
    workers = tuple(
        Worker(
            index=index,
            internal_ip=endpoint.ip_address,
            external_ip=endpoint.access_config.external_ip or None,
        )
        for index, endpoint in enumerate(node.network_endpoints)
    )
    return TpuNode(
        name=node.name.rsplit("/", 1)[-1],
        zone=zone,
        accelerator_type=node.accelerator_type,
        state=node.state.name,
        mode="vm",
        health=node.health.name if node.health else None,
        runtime=node.runtime_version or None,
        workers=workers,
        service_account=node.service_account.email or None,
        labels=dict(node.labels),
        spot=node.scheduling_config.spot,
        preemptible=node.scheduling_config.preemptible,
    )


def node_spec(parent: str, request: TpuRequest, node: Any) -> Any:
    """One slice: the node is named by node_id. Multislice: Google names the nodes `PREFIX-0..N-1` from
    multislice_params, which replaces node_id (the request's name is the prefix)."""
    from google.cloud import tpu_v2

    spec = tpu_v2.QueuedResource.Tpu.NodeSpec
    if request.slices <= 1:
        return spec(parent=parent, node_id=request.name, node=node)
    params = spec.MultisliceParams(node_count=request.slices, node_id_prefix=request.name)
    return spec(parent=parent, node=node, multislice_params=params)


def node_names_of(spec: Any, queued_name: str) -> tuple[str, ...]:
    params = spec.multislice_params
    if params.node_count > 1:
        prefix = params.node_id_prefix or queued_name  # Google's default prefix is the queued resource's id
        return tuple(f"{prefix}-{index}" for index in range(params.node_count))
    return (spec.node_id,) if spec.node_id else ()


def to_queued(queued: Any, zone: str) -> QueuedResource:
    specs = list(queued.tpu.node_spec)
    spec = specs[0] if specs else None
    failed = queued.state.failed_data.error.message if queued.state.failed_data else ""
    name = queued.name.rsplit("/", 1)[-1]
    names = node_names_of(spec, name) if spec else ()
    return QueuedResource(
        name=name,
        zone=zone,
        state=queued.state.state.name,
        node_name=names[0] if names else None,
        labels=dict(spec.node.labels) if spec else {},
        detail=failed or None,
        created_at=queued.create_time or None,
        node_names=names,
        accelerator_type=spec.node.accelerator_type or None if spec else None,
        spot="spot" in queued or bool(spec and (spec.node.scheduling_config.spot
                                                 or spec.node.scheduling_config.preemptible)),
    )
