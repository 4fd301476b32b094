"""Cloud TPU v1 (legacy Nodes) as an in-process gRPC server, with the longrunning Operations service.

Handlers are registered generically (grpc.method_handlers_generic_handler) with google.cloud.tpu_v1's own
messages as (de)serializers; operations use the Operations servicer of googleapis-common-protos.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import Any

import grpc
from google.longrunning import operations_pb2, operations_pb2_grpc

from tests.fakes.http import Faults
from tests.fakes.operations import FakeOperation, OperationFailed
from tests.fakes.tpu_model import FakeNode, TpuModel, ZoneListing

HTTP_TO_GRPC = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ALREADY_EXISTS,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.UNAVAILABLE,
}
CODE_TO_GRPC = {5: grpc.StatusCode.NOT_FOUND, 6: grpc.StatusCode.ALREADY_EXISTS}


class TpuV1Fake(operations_pb2_grpc.OperationsServicer):
    """Serves google.cloud.tpu.v1.Tpu (nodes) and google.longrunning.Operations over one TpuModel."""

    def __init__(self, model: TpuModel) -> None:
        self.model = model
        self.faults = Faults()  # method "RPC", path = the RPC's name (CreateNode, GetOperation, ...)
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.add_generic_rpc_handlers((self._tpu_handler(),))
        operations_pb2_grpc.add_OperationsServicer_to_server(self, self._server)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TpuV1Fake:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None).wait(timeout=5)

    # ------------------------------------------------------------------------------------- plumbing
    def _tpu_handler(self) -> grpc.GenericRpcHandler:
        from google.cloud import tpu_v1

        def unary(name: str, request_type: Any, response_serializer: Any, action: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                self._guarded(name, action),
                request_deserializer=request_type.deserialize,
                response_serializer=response_serializer,
            )

        operation = operations_pb2.Operation.SerializeToString
        return grpc.method_handlers_generic_handler(
            "google.cloud.tpu.v1.Tpu",
            {
                "GetNode": unary("GetNode", tpu_v1.GetNodeRequest, tpu_v1.Node.serialize, self.get_node),
                "ListNodes": unary(
                    "ListNodes", tpu_v1.ListNodesRequest, tpu_v1.ListNodesResponse.serialize, self.list_nodes
                ),
                "CreateNode": unary("CreateNode", tpu_v1.CreateNodeRequest, operation, self.create_node),
                "ListAcceleratorTypes": unary(
                    "ListAcceleratorTypes", tpu_v1.ListAcceleratorTypesRequest,
                    tpu_v1.ListAcceleratorTypesResponse.serialize, self.list_accelerator_types,
                ),
                "ListTensorFlowVersions": unary(
                    "ListTensorFlowVersions", tpu_v1.ListTensorFlowVersionsRequest,
                    tpu_v1.ListTensorFlowVersionsResponse.serialize, self.list_tensor_flow_versions,
                ),
                "DeleteNode": unary("DeleteNode", tpu_v1.DeleteNodeRequest, operation, self.delete_node),
            },
        )

    def _guarded(self, name: str, action: Any) -> Any:
        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            with self._lock:
                self.calls.append((name, request))
            fault = self.faults.take("RPC", name)
            if fault is not None:
                time.sleep(fault.latency)
                if fault.status is not None:
                    context.abort(HTTP_TO_GRPC.get(fault.status, grpc.StatusCode.UNKNOWN), fault.message)
            self.model.operations.advance_due()
            try:
                return action(request)
            except OperationFailed as failure:
                context.abort(CODE_TO_GRPC.get(failure.code, grpc.StatusCode.FAILED_PRECONDITION), failure.message)

        return handle

    def GetOperation(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802  (gRPC name)
        return self._guarded("GetOperation", self._get_operation)(request, context)

    # ------------------------------------------------------------------------------------------ nodes
    def get_node(self, request: Any) -> Any:
        zone, name = _zone_and_name(request.name)
        node = self.model.get_node(zone, name, "node")
        if node is None:
            raise OperationFailed(5, f"node {request.name} not found")
        return self.node_message(node)

    def list_nodes(self, request: Any) -> Any:
        from google.cloud import tpu_v1

        zone = request.parent.split("/locations/")[1]
        nodes = [self.node_message(n) for n in self.model.list_nodes(zone, "node")]
        return tpu_v1.ListNodesResponse(nodes=nodes, unreachable=self.model.unreachable(zone))

    def create_node(self, request: Any) -> Any:
        zone = request.parent.split("/locations/")[1]
        message = request.node
        node = FakeNode(
            name=request.node_id,
            zone=zone,
            accelerator_type=message.accelerator_type,
            runtime=message.tensorflow_version,
            mode="node",
            labels=dict(message.labels),
            preemptible=message.scheduling_config.preemptible,
            network=message.network or "default",
        )
        return self.operation_message(self.model.create_node(node))

    def delete_node(self, request: Any) -> Any:
        zone, name = _zone_and_name(request.name)
        operation = self.model.delete_node(zone, name, "node")
        if operation is None:
            raise OperationFailed(5, f"node {request.name} not found")
        return self.operation_message(operation)

    # ---------------------------------------------------------------------------------------- listings
    def list_accelerator_types(self, request: Any) -> Any:
        from google.cloud import tpu_v1

        names, token = self.model.page(self._listing(request.parent).node_types, request.page_token,
                                       request.page_size)
        types = [tpu_v1.AcceleratorType(name=f"{request.parent}/acceleratorTypes/{n}", type_=n) for n in names]
        return tpu_v1.ListAcceleratorTypesResponse(accelerator_types=types, next_page_token=token)

    def list_tensor_flow_versions(self, request: Any) -> Any:
        from google.cloud import tpu_v1

        names, token = self.model.page(self._listing(request.parent).node_versions, request.page_token,
                                       request.page_size)
        versions = [tpu_v1.TensorFlowVersion(name=f"{request.parent}/tensorflowVersions/{n}", version=n)
                    for n in names]
        return tpu_v1.ListTensorFlowVersionsResponse(tensorflow_versions=versions, next_page_token=token)

    def _listing(self, parent: str) -> ZoneListing:
        listing = self.model.listing(parent.split("/locations/")[1])
        if listing is None:
            raise OperationFailed(5, f"Location {parent} not found.")
        return listing

    def _get_operation(self, request: Any) -> Any:
        operation = self.model.operations.get(request.name)
        if operation is None:
            raise OperationFailed(5, f"operation {request.name} not found")
        return self.operation_message(operation)

    # ---------------------------------------------------------------------------------------- messages
    def node_message(self, node: FakeNode) -> Any:
        from google.cloud import tpu_v1

        return tpu_v1.Node(
            name=f"projects/{self.model.project}/locations/{node.zone}/nodes/{node.name}",
            accelerator_type=node.accelerator_type,
            tensorflow_version=node.runtime,
            state=node.state,
            health=node.health if node.state == "READY" else "HEALTH_UNSPECIFIED",
            labels=node.labels,
            network=node.network,
            service_account=self.model.node_service_account(node),
            scheduling_config=tpu_v1.SchedulingConfig(preemptible=node.preemptible),
            network_endpoints=[tpu_v1.NetworkEndpoint(ip_address=internal, port=8470) for internal, _ in node.workers],
        )

    def operation_message(self, operation: FakeOperation) -> Any:
        from google.cloud import tpu_v1
        from google.protobuf import empty_pb2

        message = operations_pb2.Operation(name=operation.name, done=operation.done)
        message.metadata.Pack(tpu_v1.OperationMetadata.pb(tpu_v1.OperationMetadata(target=operation.target)))
        if operation.error is not None:
            message.error.code = operation.error.code
            message.error.message = operation.error.message
        elif operation.done:
            if isinstance(operation.response, FakeNode):
                message.response.Pack(tpu_v1.Node.pb(self.node_message(operation.response)))
            else:
                message.response.Pack(empty_pb2.Empty())
        return message


def _zone_and_name(path: str) -> tuple[str, str]:
    parts = path.split("/")  # projects/P/locations/Z/nodes/N
    return parts[3], parts[5]
