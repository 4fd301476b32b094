"""Where the guard runs: the boundary between the guard (lease, ledger, headless loop, commands) and the
provider's way of keeping a process alive (a detached local process, or a small VM under systemd).

A provider hands out its `GuardHost` through `Provider.guard_host()`; everything above only calls these three
methods, so `guard up`, `guard down`, `status` and `down` never ask which provider they have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from pydantic import SecretStr

    from tpuops.providers.base import Login

GUARD_PREFIX = "guard"  # under gs://BUCKET/.tpuops/NAME/: the bundle, the lease and the ledger
BUNDLE = "bundle"  # under the guard's prefix: what a guard VM mirrors into its TPUOPS_HOME (guard/bundle.py)
NOTIFY_FILE = "notify"  # on a guard VM, beside the cluster's key: the webhook `guard up` copied over SSH (0600)
HOLDER_ENV = "TPUOPS_GUARD_HOLDER"  # the guard's lease holder id, the same across its restarts


@dataclass(frozen=True)
class GuardPlacement:
    """Where and how the guard runs."""

    cluster: str
    project: str | None
    zone: str | None
    machine_type: str  # e2-micro by default
    service_account: str | None
    bucket: str  # the run's bucket: the bundle is staged under gs://BUCKET/.tpuops/NAME/guard/
    labels: Mapping[str, str]
    # What a guard VM needs besides (the spec's tpu.network/subnetwork, ssh.port, and the cluster's Login): its
    # network, the workers' SSH port it must reach, and the key `guard up` copies to it over SSH.
    network: str = "default"
    subnetwork: str | None = None
    ssh_port: int = 22
    login: Login | None = None
    notify: SecretStr | None = None  # guard.notify: a guard VM gets it over SSH like the key, never the bucket


@dataclass(frozen=True)
class GuardHostInfo:
    kind: Literal["process", "vm"]
    name: str
    zone: str | None
    state: str  # running, stopped, missing, ...
    detail: str | None = None


class GuardHost(Protocol):
    def bundle_home(self) -> str | None:
        """The guard's TPUOPS_HOME where `guard up` must stage the bundle (guard/bundle.py) before `ensure`;
        None when the guard reads this machine's own state, spec and code."""
        ...

    def check(self, placement: GuardPlacement) -> None:
        """What can be judged before anything is written or created (the network lets the guard reach the
        workers, the cluster's key exists): raises with what to fix. `guard up` calls it before staging."""
        ...

    def ensure(self, placement: GuardPlacement, bundle_prefix: str) -> GuardHostInfo:
        """Start the guard, or adopt the one running and refresh it (idempotent); after `check`."""
        ...

    def describe(self, cluster: str) -> GuardHostInfo | None:
        """The guard's host as it is now; None when there is none."""
        ...

    def delete(self, cluster: str) -> bool:
        """Stop and remove the guard's host; False when there was none."""
        ...
