"""The Cloud TPU v2 REST API over a TpuModel, answered with google.cloud.tpu_v2's own messages."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from tests.fakes.http import HttpError, JsonServer, Request, dispatch
from tests.fakes.operations import FakeOperation, OperationFailed
from tests.fakes.tpu_model import FakeNode, FakeQueued, TpuModel, ZoneListing

GRPC_TO_HTTP = {5: 404, 6: 409, 9: 400, 3: 400}
LOCATION = r"^/v2/projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)"


class TpuV2Fake:
    """tpu.googleapis.com/v2 for nodes, queued resources, guest attributes and operations."""

    def __init__(self, model: TpuModel) -> None:
        self.model = model
        self.server = JsonServer(self.handle, "tpu-v2")
        self.routes = [
            ("POST", LOCATION + r"/nodes$", self.create_node),
            ("GET", LOCATION + r"/nodes$", self.list_nodes),
            ("GET", LOCATION + r"/nodes/(?P<name>[^/:]+)$", self.get_node),
            ("DELETE", LOCATION + r"/nodes/(?P<name>[^/:]+)$", self.delete_node),
            ("POST", LOCATION + r"/nodes/(?P<name>[^/:]+):getGuestAttributes$", self.guest_attributes),
            ("POST", LOCATION + r"/queuedResources$", self.create_queued),
            ("GET", LOCATION + r"/queuedResources$", self.list_queued),
            ("GET", LOCATION + r"/queuedResources/(?P<name>[^/:]+)$", self.get_queued),
            ("DELETE", LOCATION + r"/queuedResources/(?P<name>[^/:]+)$", self.delete_queued),
            ("GET", LOCATION + r"/acceleratorTypes$", self.list_accelerator_types),
            ("GET", LOCATION + r"/runtimeVersions$", self.list_runtime_versions),
            ("GET", r"^/v2/(?P<op>projects/[^/]+/locations/[^/]+/operations/[^/]+)$", self.get_operation),
        ]

    def handle(self, request: Request) -> tuple[int, Any]:
        self.model.operations.advance_due()
        return dispatch("tpu v2", self.routes, request, _operation_error)

    # ------------------------------------------------------------------------------------------ nodes
    def create_node(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import tpu_v2

        message = tpu_v2.Node.from_json(_json(request.body), ignore_unknown_fields=True)
        return self._operation(self.model.create_node(node_from_message(message, request.query["nodeId"], zone)))

    def list_nodes(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import tpu_v2

        nodes = [self.node_message(node) for node in self.model.list_nodes(zone, "vm")]
        return _dict(tpu_v2.ListNodesResponse(nodes=nodes, unreachable=self.model.unreachable(zone)))

    def get_node(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        return _dict(self.node_message(self._node(zone, name)))

    def delete_node(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        operation = self.model.delete_node(zone, name, "vm")
        if operation is None:
            raise HttpError(404, f"node {name} not found")
        return self._operation(operation)

    def guest_attributes(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        from google.cloud import tpu_v2

        node = self._node(zone, name)
        query_path = request.body.get("queryPath", "")
        namespace = query_path.rstrip("/")
        workers = []
        for index in range(len(node.workers)):
            items = [
                tpu_v2.GuestAttributesEntry(namespace="hostkeys", key=key_type, value=key)
                for key_type, key in self.model.host_keys(name, index)
                if namespace in ("", "hostkeys")
            ]
            workers.append(
                tpu_v2.GuestAttributes(query_path=query_path, query_value=tpu_v2.GuestAttributesValue(items=items))
            )
        return _dict(tpu_v2.GetGuestAttributesResponse(guest_attributes=workers))

    def _node(self, zone: str, name: str) -> FakeNode:
        node = self.model.get_node(zone, name, "vm")
        if node is None:
            raise HttpError(404, f"node projects/{self.model.project}/locations/{zone}/nodes/{name} not found")
        return node

    # ------------------------------------------------------------------------------- queued resources
    def create_queued(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import tpu_v2

        message = tpu_v2.QueuedResource.from_json(_json(request.body), ignore_unknown_fields=True)
        spec = message.tpu.node_spec[0]
        name = request.query["queuedResourceId"]
        count = spec.multislice_params.node_count
        if count == 1 or (count > 1 and spec.node_id):  # Google: node_count must be > 1, and replaces node_id
            raise HttpError(400, "multislice_params.node_count must be greater than 1, and node_id must be unset")
        prefix = spec.multislice_params.node_id_prefix or name
        node = node_from_message(spec.node, spec.node_id or prefix, zone)
        valid_until = message.queueing_policy.valid_until_duration if "queueingPolicy" in request.body else None
        queued = FakeQueued(
            name=name,
            zone=zone,
            node=node,
            spot="spot" in request.body,
            valid_until=valid_until.total_seconds() if valid_until is not None else None,
            node_count=max(count, 1),
            node_prefix=prefix,
            reservation=message.reservation_name,
        )
        return self._operation(self.model.create_queued(queued))

    def list_queued(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import tpu_v2

        items = [self.queued_message(q) for q in self.model.list_queued(zone)]
        unreachable = self.model.unreachable(zone)
        return _dict(tpu_v2.ListQueuedResourcesResponse(queued_resources=items, unreachable=unreachable))

    def get_queued(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        queued = self.model.get_queued(zone, name)
        if queued is None:
            raise HttpError(404, f"queued resource {name} not found")
        return _dict(self.queued_message(queued))

    def delete_queued(self, request: Request, project: str, zone: str, name: str) -> dict[str, Any]:
        operation = self.model.delete_queued(zone, name, force=request.query.get("force") == "true")
        if operation is None:
            raise HttpError(404, f"queued resource {name} not found")
        return self._operation(operation)

    # ---------------------------------------------------------------------------------------- listings
    def list_accelerator_types(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import tpu_v2

        names, token = self.model.page(self._listing(zone).accelerator_types, request.query.get("pageToken", ""),
                                       int(request.query.get("pageSize", 0)))
        parent = f"projects/{project}/locations/{zone}"
        types = [tpu_v2.AcceleratorType(name=f"{parent}/acceleratorTypes/{name}", type_=name,
                                        accelerator_configs=[accelerator_config(name)]) for name in names]
        return _dict(tpu_v2.ListAcceleratorTypesResponse(accelerator_types=types, next_page_token=token))

    def list_runtime_versions(self, request: Request, project: str, zone: str) -> dict[str, Any]:
        from google.cloud import tpu_v2

        names, token = self.model.page(self._listing(zone).runtimes, request.query.get("pageToken", ""),
                                       int(request.query.get("pageSize", 0)))
        parent = f"projects/{project}/locations/{zone}"
        versions = [tpu_v2.RuntimeVersion(name=f"{parent}/runtimeVersions/{name}", version=name) for name in names]
        return _dict(tpu_v2.ListRuntimeVersionsResponse(runtime_versions=versions, next_page_token=token))

    def _listing(self, zone: str) -> ZoneListing:
        listing = self.model.listing(zone)
        if listing is None:
            raise HttpError(404, f"Location projects/{self.model.project}/locations/{zone} not found.")
        return listing

    # ------------------------------------------------------------------------------------- operations
    def get_operation(self, request: Request, op: str) -> dict[str, Any]:
        operation = self.model.operations.get(op)
        if operation is None:
            raise HttpError(404, f"operation {op} not found")
        return self._operation(operation)

    def _operation(self, operation: FakeOperation) -> dict[str, Any]:
        from google.cloud import tpu_v2
        from google.longrunning import operations_pb2
        from google.protobuf import empty_pb2, json_format

        message = operations_pb2.Operation(name=operation.name, done=operation.done)
        location = operation.name.split("/operations/")[0]
        message.metadata.Pack(
            tpu_v2.OperationMetadata.pb(
                tpu_v2.OperationMetadata(target=f"{location}/{operation.target}", verb=operation.verb)
            )
        )
        if operation.error is not None:
            message.error.code = operation.error.code
            message.error.message = operation.error.message
        elif operation.done:
            response = operation.response
            if isinstance(response, FakeNode) and operation.verb == "create":
                message.response.Pack(tpu_v2.Node.pb(self.node_message(response)))
            elif isinstance(response, FakeQueued):
                message.response.Pack(tpu_v2.QueuedResource.pb(self.queued_message(response)))
            else:
                message.response.Pack(empty_pb2.Empty())
        return json_format.MessageToDict(message)

    # ---------------------------------------------------------------------------------------- messages
    def node_message(self, node: FakeNode) -> Any:
        from google.cloud import tpu_v2

        endpoints = [
            tpu_v2.NetworkEndpoint(
                ip_address=internal,
                port=8470,
                access_config=tpu_v2.AccessConfig(external_ip=external or "") if node.external_ips else None,
            )
            for internal, external in node.workers
        ]
        return tpu_v2.Node(
            name=f"projects/{self.model.project}/locations/{node.zone}/nodes/{node.name}",
            accelerator_type=node.accelerator_type,
            runtime_version=node.runtime,
            state=node.state,
            health=node.health if node.state == "READY" else "HEALTH_UNSPECIFIED",
            labels=node.labels,
            metadata=node.metadata,
            network_config=tpu_v2.NetworkConfig(network=node.network, enable_external_ips=node.external_ips),
            scheduling_config=tpu_v2.SchedulingConfig(preemptible=node.preemptible, spot=node.spot),
            service_account=tpu_v2.ServiceAccount(email=self.model.node_service_account(node)),
            network_endpoints=endpoints,
        )

    @staticmethod
    def node_spec_message(queued: FakeQueued, parent: str, node: Any) -> Any:
        from google.cloud import tpu_v2

        spec = tpu_v2.QueuedResource.Tpu.NodeSpec
        if not queued.multislice:
            return spec(parent=parent, node_id=queued.node.name, node=node)
        params = spec.MultisliceParams(node_count=queued.node_count, node_id_prefix=queued.node_prefix)
        return spec(parent=parent, node=node, multislice_params=params)

    def queued_message(self, queued: FakeQueued) -> Any:
        from google.cloud import tpu_v2

        parent = f"projects/{self.model.project}/locations/{queued.zone}"
        state = tpu_v2.QueuedResourceState(state=queued.state)
        if queued.error:
            state.failed_data = tpu_v2.QueuedResourceState.FailedData(error={"code": 8, "message": queued.error})
        node = self.node_message(queued.node)
        node.name = ""
        message = tpu_v2.QueuedResource(
            name=f"{parent}/queuedResources/{queued.name}",
            tpu=tpu_v2.QueuedResource.Tpu(
                node_spec=[self.node_spec_message(queued, parent, node)]
            ),
            state=state,
            create_time=datetime.fromtimestamp(queued.created_at, timezone.utc),
        )
        if queued.spot:
            message.spot = tpu_v2.QueuedResource.Spot()
        if queued.reservation:
            message.reservation_name = queued.reservation
        if queued.valid_until is not None:  # Google answers with the absolute time the duration ends at
            until = datetime.fromtimestamp(queued.created_at + queued.valid_until, timezone.utc)
            message.queueing_policy = tpu_v2.QueuedResource.QueueingPolicy(valid_until_time=until)
        return message


def node_from_message(message: Any, name: str, zone: str) -> FakeNode:
    return FakeNode(
        name=name,
        zone=zone,
        accelerator_type=message.accelerator_type,
        runtime=message.runtime_version,
        mode="vm",
        labels=dict(message.labels),
        metadata=dict(message.metadata),
        service_account=message.service_account.email,
        preemptible=message.scheduling_config.preemptible,
        spot=message.scheduling_config.spot,
        network=message.network_config.network or "default",
        external_ips=message.network_config.enable_external_ips,
    )


def accelerator_config(accelerator_type: str) -> Any:
    """The AcceleratorConfig Google lists with a type; the fake fills in its generation only (no topology)."""
    from google.cloud import tpu_v2

    generation = accelerator_type.rsplit("-", 1)[0].upper().replace("LITEPOD", "LITE_POD")
    known = generation in tpu_v2.AcceleratorConfig.Type.__members__
    return tpu_v2.AcceleratorConfig(type_=generation if known else "TYPE_UNSPECIFIED")


def _dict(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(type(message).pb(message))


def _json(body: dict[str, Any]) -> str:
    import json

    return json.dumps(body)


def _operation_error(err: Exception) -> HttpError | None:
    if isinstance(err, OperationFailed):
        return HttpError(GRPC_TO_HTTP.get(err.code, 400), err.message)
    return None
