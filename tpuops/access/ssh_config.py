"""`Host tpuops-NAME-wN` blocks for the system OpenSSH tools (ssh, scp, rsync, VS Code Remote), one file per cluster
under TPUOPS_HOME/ssh/, all reached from ~/.ssh/config by one `Include` line the user adds once.

Each block names the worker's address and port, the login user, the cluster's own key (IdentitiesOnly) and its
pinned known_hosts with StrictHostKeyChecking yes: a host key that is not the pinned one is refused, and a worker
whose key was never pinned cannot be reached this way until tpuops pinned it (`tpuops exec NAME -- true`).
`up` rewrites a cluster's file, `down` removes it, and a guard's hand-back of a re-created TPU rewrites it.
"""

from __future__ import annotations

from pathlib import Path

from tpuops import keys
from tpuops.access.workers import ssh_targets
from tpuops.atomic import write_atomic
from tpuops.state import ClusterState, WorkerRecord

CONFIG_DIR = "ssh"
SUFFIX = ".conf"


def config_dir(home: Path) -> Path:
    return home / CONFIG_DIR


def include_line(home: Path) -> str:
    """What the user puts at the top of ~/.ssh/config (before any Host block, where ssh reads it for every host)."""
    return f"Include {_quoted(str(config_dir(home) / ('*' + SUFFIX)))}"


def host_alias(cluster: str, worker: str) -> str:
    return f"tpuops-{cluster}-{worker}"


def ssh_workers(state: ClusterState) -> list[WorkerRecord]:
    """The workers reached over SSH (as ssh_targets picks them: a legacy Node's client VM alone); none for a
    provider whose workers are directories on this machine (they have a `home`)."""
    return [w for w in ssh_targets(state) if not w.home]


def render(state: ClusterState, cluster_dir: Path) -> str:
    user = state.login_user()
    blocks = [f"# tpuops cluster {state.name}: written by tpuops (`up`, `ssh-config`); edits are overwritten\n"]
    for worker in ssh_workers(state):
        blocks.append("\n".join([
            f"Host {host_alias(state.name, worker.name)}",
            f"    HostName {worker.ssh_host}",
            f"    Port {worker.ssh_port}",
            f"    User {user}",
            f"    IdentityFile {_quoted(str(cluster_dir / keys.PRIVATE_KEY))}",
            "    IdentitiesOnly yes",
            f"    UserKnownHostsFile {_quoted(str(cluster_dir / keys.KNOWN_HOSTS))}",
            "    GlobalKnownHostsFile /dev/null",
            "    StrictHostKeyChecking yes",
            "    ServerAliveInterval 30",
            "    ServerAliveCountMax 4",
        ]) + "\n")
    return "\n".join(blocks)


def refresh(home: Path, state: ClusterState) -> Path | None:
    """Rewrite the cluster's file from its state (removed when it has no SSH workers); its path, or None."""
    path = config_dir(home) / f"{state.name}{SUFFIX}"
    if not ssh_workers(state):
        path.unlink(missing_ok=True)
        return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, render(state, home / "clusters" / state.name))
    return path


def forget(home: Path, cluster: str) -> None:
    (config_dir(home) / f"{cluster}{SUFFIX}").unlink(missing_ok=True)


def pinned(cluster_dir: Path, worker: WorkerRecord) -> bool:
    """Whether the cluster's known_hosts holds a key for this worker (else StrictHostKeyChecking refuses it)."""
    field = keys.known_hosts_name(worker.ssh_host, worker.ssh_port)
    path = cluster_dir / keys.KNOWN_HOSTS
    lines = path.read_text().splitlines() if path.is_file() else []
    return any(field in line.split(" ", 1)[0].split(",") for line in lines if line and not line.startswith("#"))


def _quoted(text: str) -> str:
    return f'"{text}"' if any(c in text for c in ' \t"') else text
