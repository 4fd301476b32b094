"""Where a cluster lives (Google Cloud, or this machine) beyond the cloud APIs: how its workers are reached,
where its objects are, and the paths and environment its trainer sees.

`Context` alone builds a provider (`Context.provider_for`); `ops/` uses what it supplies and never asks which
one it has. The implementations are `providers/gcp.py` and `providers/local.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from tpuops.cloud.base import Cloud
    from tpuops.cloud.blobs import BlobStore
    from tpuops.providers.guard_host import GuardHost
    from tpuops.remote.base import Runner

ProviderName = Literal["gcp", "local"]
COORDINATOR_PORT = 8476  # jax.distributed's default; torch.distributed and our templates use it too
LIBTPU_LOCKFILE = "/tmp/libtpu_lockfile"
# Overrides for simulators and tests: where the "TPU devices" and libtpu's lock file are (~/ = worker home).
DEVICE_GLOB_ENV = "TPUOPS_TPU_DEVICE_GLOB"
LOCKFILE_ENV = "TPUOPS_LIBTPU_LOCKFILE"


@dataclass(frozen=True)
class LocalTarget:
    """What deleting a simulated TPU removes on this machine (the local provider's layout), and where the
    record goes (the directory standing for gs://BUCKET/.tpuops/NAME)."""

    node_record: str
    workers_dir: str
    record_dir: str | None
    queued_record: str | None = None


@dataclass(frozen=True)
class WorkerTarget:
    """One worker as a runner reaches it."""

    name: str  # w0, w1, ... or "client" (a legacy Node's client VM)
    host: str
    port: int = 22
    internal_ip: str | None = None
    home: str | None = None  # where the worker's home is on this machine (local provider)


@dataclass(frozen=True)
class Login:
    """The cluster's SSH identity, as `up` left it in the cluster's directory."""

    user: str
    key_path: Path
    known_hosts_path: Path


@dataclass(frozen=True)
class TrainerSite:
    """What the framework environment depends on besides the provider."""

    cluster: str
    framework: str | None
    tpu_mode: Literal["vm", "node"]
    node_ips: tuple[str, ...] = ()  # a legacy Node's hosts, as `up` recorded them


class Provider(Protocol):
    name: ProviderName
    project: str | None
    list_prices: bool  # whether its TPUs cost the catalog's list price (the simulator's are free)

    def cloud(self) -> Cloud:
        """The provider's clients (built on first use: commands on workers never need them)."""
        ...

    def runners(self, targets: Sequence[WorkerTarget], login: Login, *, connect_timeout: float,
                refused_timeout: float | None = None,
                on_new_host_key: Callable[[str, str], None] | None = None) -> list[Runner]: ...

    def require_ssh(self, cluster: str) -> None:
        """Raise UsageError when the workers cannot be reached by system OpenSSH (`tpuops ssh`)."""
        ...

    def relay_hosts(self, targets: Sequence[WorkerTarget]) -> dict[str, str]:
        """Worker name -> address the other workers reach it at (a push relays between workers)."""
        ...

    def blob_store(self, url: str) -> BlobStore: ...

    def localize(self, text: str, buckets: Sequence[str]) -> str:
        """`text` as the workers must see it (the local provider's gs://BUCKET is a directory)."""
        ...

    def tpu_paths(self, vfio: bool) -> tuple[str, str]:
        """The device files the TPU runtime holds open (/dev/vfio/* or /dev/accel*), and libtpu's lock file."""
        ...

    def coordinator(self, worker0_ip: str) -> str:
        """host:port of the multi-host coordinator, on worker 0."""
        ...

    def framework_env(self, site: TrainerSite) -> dict[str, str]:
        """What the framework needs to find the TPU."""
        ...

    def autostop_target(self, cluster: str, node: str, queued: str | None, bucket: str | None,
                        compute: bool = False) -> LocalTarget | None:
        """What the autostop agent deletes when it is not a TPU behind Google's API (None: the TPU API)."""
        ...

    def guard_host(self) -> GuardHost:
        """Where `tpuops guard` keeps the headless watch alive (a local process, or a small VM)."""
        ...

    def preempt(self, node: str, compute: bool = False) -> None:
        """Preempt a TPU node (`compute`: a Compute Engine TPU's host of rank 0) on purpose, to rehearse recovery
        (`tpuops simulate preempt`); UsageError where the cloud cannot."""
        ...

    def stock_out(self, zone: str, seconds: float) -> None:
        """A zone refuses to create TPUs for `seconds` (`tpuops simulate stockout`); UsageError where the cloud
        cannot."""
        ...


def tpu_paths_from(env: Mapping[str, str], vfio: bool, prefix: str = "") -> tuple[str, str]:
    """The defaults (under `prefix`, e.g. "~" for a worker home), unless the environment overrides them."""
    default_glob = "/dev/vfio/*" if vfio else "/dev/accel*"
    return env.get(DEVICE_GLOB_ENV, prefix + default_glob), env.get(LOCKFILE_ENV, prefix + LIBTPU_LOCKFILE)
