"""Building the real Google clients from the environment (the only place that knows endpoints).

Endpoint overrides use gcloud's own variable names where they exist, so tests and users can point
tpuops elsewhere: CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU / _COMPUTE / _CLOUDQUOTAS (base URLs), STORAGE_EMULATOR_HOST,
TPUOPS_TPU_V1_GRPC_ENDPOINT (host:port of an insecure gRPC endpoint). With any override set the clients
use anonymous credentials; otherwise Application Default Credentials.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tpuops.cloud.endpoints import base_url
from tpuops.errors import CredentialsError

TPU_ENDPOINT = "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU"
COMPUTE_ENDPOINT = "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE"
STORAGE_ENDPOINT = "STORAGE_EMULATOR_HOST"
TPU_V1_GRPC_ENDPOINT = "TPUOPS_TPU_V1_GRPC_ENDPOINT"
QUOTAS_ENDPOINT = "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDQUOTAS"
OVERRIDES = (TPU_ENDPOINT, COMPUTE_ENDPOINT, STORAGE_ENDPOINT, TPU_V1_GRPC_ENDPOINT, QUOTAS_ENDPOINT)


@dataclass(frozen=True)
class Endpoints:
    tpu: str | None = None
    compute: str | None = None
    storage: str | None = None
    tpu_v1_grpc: str | None = None
    quotas: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Endpoints:
        return cls(
            tpu=base_url(env.get(TPU_ENDPOINT)),
            compute=base_url(env.get(COMPUTE_ENDPOINT)),
            storage=base_url(env.get(STORAGE_ENDPOINT)),
            tpu_v1_grpc=env.get(TPU_V1_GRPC_ENDPOINT) or None,
            quotas=base_url(env.get(QUOTAS_ENDPOINT)),
        )

    @property
    def any_override(self) -> bool:
        return any((self.tpu, self.compute, self.storage, self.tpu_v1_grpc, self.quotas))


def credentials(endpoints: Endpoints) -> Any:
    from google.auth import credentials as gcreds

    if endpoints.any_override:
        return gcreds.AnonymousCredentials()
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except DefaultCredentialsError:
        raise CredentialsError(
            "no Google credentials found",
            "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
        ) from None
    return creds


def client_options(endpoint: str | None) -> Any:
    from google.api_core.client_options import ClientOptions

    return ClientOptions(api_endpoint=endpoint) if endpoint else None


def tpu_v2_client(endpoints: Endpoints, creds: Any) -> Any:
    from google.cloud import tpu_v2

    return tpu_v2.TpuClient(credentials=creds, transport="rest", client_options=client_options(endpoints.tpu))


def quotas_client(endpoints: Endpoints, creds: Any) -> Any:
    from google.cloud import cloudquotas_v1

    return cloudquotas_v1.CloudQuotasClient(credentials=creds, transport="rest",
                                            client_options=client_options(endpoints.quotas))


def tpu_v1_client(endpoints: Endpoints, creds: Any) -> Any:
    from google.cloud import tpu_v1

    if endpoints.tpu_v1_grpc:
        import grpc
        from google.cloud.tpu_v1.services.tpu.transports import TpuGrpcTransport

        channel = grpc.insecure_channel(endpoints.tpu_v1_grpc)
        return tpu_v1.TpuClient(transport=TpuGrpcTransport(channel=channel))
    return tpu_v1.TpuClient(credentials=creds)


def compute_clients(endpoints: Endpoints, creds: Any) -> tuple[Any, Any, Any]:
    """(InstancesClient, ZoneOperationsClient, ProjectsClient), all REST."""
    from google.cloud import compute_v1

    options = client_options(endpoints.compute)
    return (
        compute_v1.InstancesClient(credentials=creds, client_options=options),
        compute_v1.ZoneOperationsClient(credentials=creds, client_options=options),
        compute_v1.ProjectsClient(credentials=creds, client_options=options),
    )


@dataclass(frozen=True)
class ComputeTpuClients:
    instances: Any
    templates: Any
    policies: Any
    groups: Any
    zone_operations: Any
    region_operations: Any
    global_operations: Any


def compute_tpu_clients(endpoints: Endpoints, creds: Any) -> ComputeTpuClients:
    """The clients of Compute Engine TPUs (instances, templates, policies, groups and their operations), all REST."""
    from google.cloud import compute_v1

    options = client_options(endpoints.compute)

    def make(client: Any) -> Any:
        return client(credentials=creds, client_options=options)

    return ComputeTpuClients(
        instances=make(compute_v1.InstancesClient), templates=make(compute_v1.InstanceTemplatesClient),
        policies=make(compute_v1.ResourcePoliciesClient), groups=make(compute_v1.InstanceGroupManagersClient),
        zone_operations=make(compute_v1.ZoneOperationsClient),
        region_operations=make(compute_v1.RegionOperationsClient),
        global_operations=make(compute_v1.GlobalOperationsClient),
    )


def firewalls_client(endpoints: Endpoints, creds: Any) -> Any:
    from google.cloud import compute_v1

    return compute_v1.FirewallsClient(credentials=creds, client_options=client_options(endpoints.compute))


def storage_client(endpoints: Endpoints, creds: Any, project: str | None) -> Any:
    """The one place a storage.Client is made (bucket adapter and blob stores)."""
    from google.cloud import storage

    return storage.Client(project=project, credentials=creds, client_options=client_options(endpoints.storage))


_building = 0  # clients being built right now, in any thread
_building_lock = threading.Lock()


def building_clients() -> bool:
    """A client is being built (its SDK imported): a call waiting on it is not waiting on the network."""
    return _building > 0


class LazyClient:
    """Base of the adapters: the Google client is built on first use (importing one costs a second or more)."""

    def __init__(self, make_client: Callable[[], Any]) -> None:
        self._make_client = make_client

    @functools.cached_property
    def client(self) -> Any:
        global _building
        with _building_lock:
            _building += 1
        try:
            return self._make_client()
        finally:
            with _building_lock:
                _building -= 1
