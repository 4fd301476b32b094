"""Clusters on Google Cloud: workers reached over SSH, objects in GCS, the TPU's real device paths."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tpuops.errors import UsageError
from tpuops.providers.base import COORDINATOR_PORT, Login, ProviderName, TrainerSite, WorkerTarget, tpu_paths_from

if TYPE_CHECKING:
    from tpuops.cloud.base import Cloud
    from tpuops.cloud.blobs import BlobStore
    from tpuops.providers.guard_host import GuardHost
    from tpuops.remote.base import Runner

XRT_PORT = 8470  # a legacy TPU Node's gRPC endpoint


class GcpProvider:
    name: ProviderName = "gcp"
    list_prices = True

    def __init__(self, env: Mapping[str, str], project: str | None, require_project: Callable[[], str]) -> None:
        self.env = env
        self.project = project
        self._require_project = require_project
        self._cloud: Cloud | None = None

    def cloud(self) -> Cloud:
        if self._cloud is None:
            from tpuops.cloud.gcp import make_cloud

            self._cloud = make_cloud(self.env, self.project or self._require_project())
        return self._cloud

    def runners(self, targets: Sequence[WorkerTarget], login: Login, *, connect_timeout: float,
                refused_timeout: float | None = None,
                on_new_host_key: Callable[[str, str], None] | None = None) -> list[Runner]:
        from tpuops.remote.ssh import KnownHosts, SshRunner, SshSettings, SshTarget, load_private_key

        settings = SshSettings(login.key_path, login.known_hosts_path, connect_timeout=connect_timeout,
                               refused_timeout=refused_timeout)
        known_hosts = KnownHosts(login.known_hosts_path, trust_on_first_use=True, on_new_key=on_new_host_key)
        key = load_private_key(login.key_path)  # once, and a bad key is one error, not one per worker
        return [SshRunner(SshTarget(t.name, t.host, t.port, login.user), settings, known_hosts, key) for t in targets]

    def require_ssh(self, cluster: str) -> None:
        return None

    def relay_hosts(self, targets: Sequence[WorkerTarget]) -> dict[str, str]:
        return {t.name: t.internal_ip or t.host for t in targets}

    def blob_store(self, url: str) -> BlobStore:
        from tpuops.providers.blob_urls import open_blob_store

        return open_blob_store(url, env=self.env)

    def localize(self, text: str, buckets: Sequence[str]) -> str:
        return text

    def autostop_target(self, cluster: str, node: str, queued: str | None, bucket: str | None,
                        compute: bool = False) -> None:
        return None  # the agent deletes through the TPU REST API with the VM's token

    def tpu_paths(self, vfio: bool) -> tuple[str, str]:
        return tpu_paths_from(self.env, vfio)

    def preempt(self, node: str, compute: bool = False) -> None:
        raise UsageError("Google Cloud has no API to preempt a TPU on request, so a preemption cannot be "
                         "simulated on provider: gcp",
                         "rehearse with a copy of the spec that sets `provider: local`, e.g. the quickstart")

    def stock_out(self, zone: str, seconds: float) -> None:
        raise UsageError("a zone's capacity cannot be taken away on request on provider: gcp",
                         "rehearse with a copy of the spec that sets `provider: local`")

    def guard_host(self) -> GuardHost:
        from tpuops.providers.gcp_guard_host import GcpGuardHost, GuardVmLayout
        from tpuops.state import tpuops_home

        return GcpGuardHost(self.cloud, self.blob_store, tpuops_home(dict(self.env)) / "cache" / "wheels",
                            GuardVmLayout.from_env(self.env))

    def coordinator(self, worker0_ip: str) -> str:
        return f"{worker0_ip}:{COORDINATOR_PORT}"

    def framework_env(self, site: TrainerSite) -> dict[str, str]:
        if site.tpu_mode == "node":
            node_ip = site.node_ips[0] if site.node_ips else ""
            if not node_ip:
                raise UsageError(f"the TPU Node of '{site.cluster}' has no recorded IP address",
                                 "run `tpuops up SPEC` again to refresh the cluster's state")
            if site.framework == "pytorch":
                return {"XRT_TPU_CONFIG": f"tpu_worker;0;{node_ip}:{XRT_PORT}", "TPU_IP_ADDRESS": node_ip}
            return {"TPU_NAME": site.cluster}  # TPUClusterResolver looks the Node up by name
        if site.framework == "pytorch":
            return {"PJRT_DEVICE": "TPU"}
        if site.framework == "tensorflow":
            return {"TPU_NAME": "local"}
        return {}
