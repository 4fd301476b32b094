"""`tpuops ssh-config`: write the `Host tpuops-NAME-wN` blocks of the named clusters (default: every cluster with
local state) for the system OpenSSH tools, and say the one `Include` line ~/.ssh/config needs (never edited here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tpuops.access import ssh_config
from tpuops.access.cluster import spec_of
from tpuops.access.guard_state import with_guard_state
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.spec import Spec
from tpuops.state import ClusterState


@dataclass(frozen=True)
class SshHost:
    alias: str
    cluster: str
    worker: str
    address: str
    pinned: bool  # its host key is in the cluster's known_hosts (else ssh refuses it: StrictHostKeyChecking yes)


@dataclass(frozen=True)
class SshConfigReport:
    include: str  # the line to add at the top of ~/.ssh/config
    files: tuple[str, ...]
    hosts: tuple[SshHost, ...]
    skipped: tuple[str, ...]  # "NAME: why" for clusters without SSH workers

    def as_dict(self) -> dict[str, object]:
        return {"include": self.include, "files": list(self.files), "skipped": list(self.skipped),
                "hosts": [vars(host) for host in self.hosts]}


def write_ssh_config(ctx: Context, names: Sequence[str] = ()) -> SshConfigReport:
    """Each cluster's file rewritten from its state (with what its guard changed merged in). A cluster named
    explicitly that has no SSH workers is a usage error; among all clusters it is skipped, with the reason."""
    home = ctx.store.home
    files, hosts, skipped = [], [], []
    for name in names or ctx.store.names():
        state = ctx.store.require(name)
        spec = spec_of(state)
        state = with_guard_state(ctx, state, spec)
        why = _no_ssh(ctx, state, spec)
        if why:
            if names:
                raise UsageError(f"cluster '{name}': {why}", "ssh-config is for clusters with SSH workers")
            skipped.append(f"{name}: {why}")
            ssh_config.forget(home, name)
            continue
        path = ssh_config.refresh(home, state)
        files.append(str(path))
        cluster_dir = ctx.store.cluster_dir(name)
        hosts += [SshHost(ssh_config.host_alias(name, w.name), name, w.name, f"{w.ssh_host}:{w.ssh_port}",
                          ssh_config.pinned(cluster_dir, w)) for w in ssh_config.ssh_workers(state)]
    return SshConfigReport(ssh_config.include_line(home), tuple(files), tuple(hosts), tuple(skipped))


def _no_ssh(ctx: Context, state: ClusterState, spec: Spec | None) -> str | None:
    try:
        ctx.provider_for(spec, state).require_ssh(state.name)
    except UsageError as err:
        return err.message
    if not ssh_config.ssh_workers(state):
        return "no workers recorded (run `tpuops up SPEC` first)"
    return None
