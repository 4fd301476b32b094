"""All fakes of one Google Cloud project together, and the pytest fixture that starts and stops them.

Use from a test module:

    from tests.fakes.cloud import fake_gcp  # noqa: F401  (pytest fixture)
    from tests.gcs_emulator import gcs_emulator  # noqa: F401

`fake_gcp.env` points the tpuops CLI (a subprocess) at the fakes the way a user would point it at a
private endpoint: gcloud's endpoint override variables, STORAGE_EMULATOR_HOST, TPUOPS_TPU_V1_GRPC_ENDPOINT.

Knobs (set them before `tpuops up`):
- addresses: `fake_gcp.tpu.external_ip = lambda zone, node, index: "127.0.0.1"` (default 127.0.0.(10+index);
  keep it on loopback), `fake_gcp.tpu.internal_ip`, `fake_gcp.compute.external_ip = lambda vm, n: ...`;
- host keys published as guest attributes: `fake_gcp.tpu.host_keys = lambda node, index: [("ssh-ed25519", b64)]`,
  `fake_gcp.compute.host_keys = lambda vm: [...]` (e.g. the keys of the sshd a test started);
- latency: `fake_gcp.tpu.create_seconds`, `.delete_seconds`, `.queued_seconds`, `fake_gcp.compute.create_seconds`,
  `fake_gcp.gcs.faults.delay("POST", r"/storage/v1/b$", 0.5)`; Compute's operations answer RUNNING to their first
  read (`fake_gcp.compute.operations.running_reads`, default 1) and, unread, finish `.linger` (1 s) after due;
- faults: `fake_gcp.tpu_v2.server.faults.http_error("POST", r"/nodes$", 503, times=2)`,
  `fake_gcp.tpu_v1.faults.http_error("RPC", "CreateNode", 503)`, `fake_gcp.tpu.capacity_failures[zone] = n`
  (-1: always), `.transient_failures[zone]`, `.queued_failures[zone]`, `fake_gcp.tpu.preempt(zone, node)`,
  `fake_gcp.tpu.lose_worker(zone, node, index)`, `fake_gcp.tpu.suspend_queued(zone, name)`;
- quota: `fake_gcp.quotas.model.grant("TPUV6EPreemptiblePerProjectPerZoneForTPUAPI", {"europe-west4-a": 64})`;
- what was asked: `fake_gcp.tpu_v2.server.calls("POST", r"/nodes$")`, `fake_gcp.gcs.calls(...)`,
  `fake_gcp.tpu_v1.calls`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.fakes.compute import ComputeFake, ComputeModel
from tests.fakes.compute_tpus import TpuComputeModel, TpuComputeRoutes
from tests.fakes.gcs import GcsFront
from tests.fakes.quotas_http import QuotasFake, QuotasModel
from tests.fakes.tpu_model import TpuModel
from tests.fakes.tpu_v1_grpc import TpuV1Fake
from tests.fakes.tpu_v2_http import TpuV2Fake

PROJECT = "tpuops-test"


@dataclass
class FakeGcp:
    tpu: TpuModel
    tpu_v2: TpuV2Fake
    tpu_v1: TpuV1Fake
    compute: ComputeModel
    compute_api: ComputeFake
    gcs: GcsFront
    quotas: QuotasFake
    compute_tpus: TpuComputeModel | None = None  # TPUs on Compute Engine (tests.fakes.compute_tpus)
    gcs_client_factory: object = field(repr=False, default=None)

    @property
    def env(self) -> dict[str, str]:
        return {
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": self.tpu_v2.server.url + "/",
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": self.compute_api.server.url + "/compute/v1/",
            "STORAGE_EMULATOR_HOST": self.gcs.url,
            "TPUOPS_TPU_V1_GRPC_ENDPOINT": self.tpu_v1.endpoint,
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDQUOTAS": self.quotas.url + "/",
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            # Fast polls and backoffs: the fakes answer in milliseconds.
            "TPUOPS_POLL_INTERVAL": "0.02",
            "TPUOPS_RETRY_INITIAL": "0.01",
            "TPUOPS_OPERATION_TIMEOUT": "60",
            "TPUOPS_CAPACITY_BACKOFF": "0.05",
        }

    def storage(self):  # -> google.cloud.storage.Client on the emulator (for assertions)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=PROJECT, credentials=AnonymousCredentials(), client_options={"api_endpoint": self.gcs.url}
        )

    def stop(self) -> None:
        for stop in (self.tpu_v2.server.stop, self.tpu_v1.stop, self.compute_api.server.stop, self.gcs.stop,
                     self.quotas.server.stop):
            stop()


def start_fake_gcp(storage_emulator_url: str) -> FakeGcp:
    tpu = TpuModel(PROJECT)
    compute = ComputeModel(PROJECT)
    started: list[object] = []
    try:
        tpu_v2 = TpuV2Fake(tpu)
        tpu_v2.server.start()
        started.append(tpu_v2.server)
        tpu_v1 = TpuV1Fake(tpu).start()
        started.append(tpu_v1)
        compute_api = ComputeFake(compute)
        compute_tpus = TpuComputeModel(compute)
        TpuComputeRoutes(compute_api, compute_tpus)
        compute_api.server.start()
        started.append(compute_api.server)
        quotas = QuotasFake(QuotasModel(PROJECT))
        quotas.server.start()
        started.append(quotas.server)
        gcs = GcsFront(storage_emulator_url).start()
    except BaseException:
        for server in reversed(started):
            server.stop()  # type: ignore[attr-defined]
        raise
    return FakeGcp(tpu=tpu, tpu_v2=tpu_v2, tpu_v1=tpu_v1, compute=compute, compute_api=compute_api, gcs=gcs,
                   quotas=quotas, compute_tpus=compute_tpus)


@pytest.fixture
def fake_gcp(gcs_emulator) -> Iterator[FakeGcp]:  # noqa: ANN001  (tests.gcs_emulator.GcsEmulator)
    fake = start_fake_gcp(gcs_emulator.host)
    try:
        yield fake
    finally:
        fake.stop()
