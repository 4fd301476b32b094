"""Clusters on this machine: workers are directories run by local processes, buckets are directories, the
"TPU devices" live in each worker's home, and the frameworks run on the CPU."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tpuops.cloud.local.layout import bucket_path, buckets_root
from tpuops.errors import UsageError
from tpuops.providers.base import LocalTarget, Login, ProviderName, TrainerSite, WorkerTarget, tpu_paths_from

if TYPE_CHECKING:
    from tpuops.cloud.base import Cloud
    from tpuops.cloud.blobs import BlobStore
    from tpuops.providers.guard_host import GuardHost
    from tpuops.remote.base import Runner

CPU_ENV = {"pytorch": {"PJRT_DEVICE": "CPU"}, "jax": {"JAX_PLATFORMS": "cpu"}}


class LocalProvider:
    name: ProviderName = "local"
    project: str | None = None
    list_prices = False

    def __init__(self, env: Mapping[str, str], root: Path) -> None:
        self.env = env
        self.root = root
        self._cloud: Cloud | None = None

    def cloud(self) -> Cloud:
        if self._cloud is None:
            from tpuops.cloud.local import make_cloud

            self._cloud = make_cloud(self.root)
        return self._cloud

    def runners(self, targets: Sequence[WorkerTarget], login: Login, *, connect_timeout: float,
                refused_timeout: float | None = None,
                on_new_host_key: Callable[[str, str], None] | None = None) -> list[Runner]:
        from tpuops.remote.local import LocalRunner

        return [LocalRunner(t.name, Path(t.home or ".")) for t in targets]

    def require_ssh(self, cluster: str) -> None:
        raise UsageError("`tpuops ssh` needs SSH workers; the local provider's workers are directories",
                         f"use `tpuops exec {cluster} -- CMD`")

    def relay_hosts(self, targets: Sequence[WorkerTarget]) -> dict[str, str]:
        return {}  # every worker is on this machine: nothing to relay

    def blob_store(self, url: str) -> BlobStore:
        from tpuops.providers.blob_urls import open_blob_store

        return open_blob_store(url, env=self.env, local_buckets=buckets_root(self.root))

    def localize(self, text: str, buckets: Sequence[str]) -> str:
        for bucket in buckets:
            text = text.replace(f"gs://{bucket}", str(bucket_path(self.root, f"gs://{bucket}")))
        return text

    def tpu_paths(self, vfio: bool) -> tuple[str, str]:
        return tpu_paths_from(self.env, vfio, prefix="~")  # the simulator's fake devices are in each home

    def coordinator(self, worker0_ip: str) -> str:
        return f"127.0.0.1:{free_port()}"  # several local clusters may run at once

    def framework_env(self, site: TrainerSite) -> dict[str, str]:
        return dict(CPU_ENV.get(site.framework or "", {}))

    def autostop_target(self, cluster: str, node: str, queued: str | None, bucket: str | None,
                        compute: bool = False) -> LocalTarget:
        return autostop_target(self.root, cluster, node, queued, bucket, compute)

    def guard_host(self) -> GuardHost:
        from tpuops.providers.local_guard_host import LocalGuardHost

        return LocalGuardHost(self.env, self.root)

    def preempt(self, node: str, compute: bool = False) -> None:
        """What Google does to a preemptible TPU: its hosts' processes end and the node reads PREEMPTED (a Compute
        Engine TPU: its host of rank 0 stops, and the slice reads PREEMPTED if Spot, else BROKEN)."""
        from tpuops.cloud.local.apis import LocalCloud
        from tpuops.cloud.local.compute_tpus import LocalComputeTpus

        if compute:
            LocalComputeTpus(self.root).preempt(node)
        else:
            LocalCloud(self.root).preempt_node(node)

    def stock_out(self, zone: str, seconds: float) -> None:
        """A simulated zone out of capacity: creating a TPU there fails as Google's stockout does."""
        from tpuops.cloud.local.apis import LocalCloud

        LocalCloud(self.root).stock_out(zone, seconds)


def autostop_target(root: Path, cluster: str, node: str, queued: str | None, bucket: str | None,
                    compute: bool = False) -> LocalTarget:
    """What the agent removes to delete a simulated TPU (the records LocalCloud keeps under tpus/ and queued/, or
    a Compute Engine TPU's under tpu_vms/; the workers' homes under workers/NODE), and the directory standing for
    gs://BUCKET/.tpuops/NAME."""
    record_dir = str(bucket_path(root, f"gs://{bucket}/.tpuops/{cluster}")) if bucket else None
    records = "tpu_vms" if compute else "tpus"  # cloud/local/compute_tpus.py keeps its records apart
    return LocalTarget(node_record=str(root / records / f"{node}.json"), workers_dir=str(root / "workers" / node),
                       record_dir=record_dir, queued_record=str(root / "queued" / f"{queued}.json") if queued else None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
