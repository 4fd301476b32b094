"""Workflows over a cluster's workers: pick them, connect, exec, push, and the argv for `tpuops ssh`.

Everything here reads what `up` left in the state directory (workers, the key pair, pinned host keys)
and hands the work to `tpuops.remote` (runners, fan-out, sync). For a legacy TPU Node the only SSH target
is the client VM (the TPU host itself cannot be reached), which `up` records as a worker with
`role: client_vm`.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuops.context import Context
from tpuops.errors import SpecError, UsageError
from tpuops.remote.base import Command, LineHandler, Runner, RunResult
from tpuops.remote.fanout import DEFAULT_MAX_PARALLEL, exec_all
from tpuops.remote.local import LocalRunner
from tpuops.remote.ssh import KnownHosts, SshRunner, SshSettings, SshTarget, load_private_key
from tpuops.spec import Spec, load_spec
from tpuops.state import ClusterState, WorkerRecord

KEY_FILE = "id_ed25519"
KNOWN_HOSTS_FILE = "known_hosts"
DEFAULT_CONNECT_TIMEOUT = 60.0


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one cluster's workers, as `up` left it."""

    state: ClusterState
    spec: Spec | None
    workers: tuple[WorkerRecord, ...]  # the SSH targets (all TPU workers, or the client VM of a legacy Node)
    user: str
    key_path: Path
    known_hosts_path: Path


def resolve_name(ctx: Context, name: str | None) -> str:
    """The cluster a command is about: the one given, else the only one there is."""
    if name:
        return name
    names = ctx.store.names()
    if len(names) == 1:
        return names[0]
    if not names:
        raise UsageError("no clusters here", "create one with `tpuops up SPEC`")
    raise UsageError(f"several clusters here ({', '.join(names)})", "name the one you mean")


def cluster_access(ctx: Context, name: str | None, *, need_spec: bool = False) -> ClusterAccess:
    state = ctx.store.require(resolve_name(ctx, name))
    spec = _load_spec(state, required=need_spec)
    targets = ssh_targets(state)
    if not targets:
        raise UsageError(
            f"cluster '{state.name}' has no workers recorded", "run `tpuops up SPEC` (or `tpuops status`) first"
        )
    user = state.ssh_user or (spec.ssh.user if spec and spec.ssh.user else None) or getpass.getuser()
    cluster_dir = ctx.store.cluster_dir(state.name)
    return ClusterAccess(state, spec, tuple(targets), user, cluster_dir / KEY_FILE, cluster_dir / KNOWN_HOSTS_FILE)


def ssh_targets(state: ClusterState) -> list[WorkerRecord]:
    """The workers commands go to: the client VM when there is one marked as the only target (legacy Node)."""
    client = [w for w in state.workers if getattr(w, "role", "tpu") == "client_vm"]
    return client or [w for w in state.workers if getattr(w, "role", "tpu") != "client_vm"]


def _load_spec(state: ClusterState, required: bool) -> Spec | None:
    try:
        return load_spec(state.spec_path)
    except SpecError:
        if required:
            raise
        return None  # exec and ssh only need the state; a moved spec must not stop them


def worker_name(worker: WorkerRecord) -> str:
    return "client" if getattr(worker, "role", "tpu") == "client_vm" else f"w{worker.index}"


def select_workers(workers: Sequence[WorkerRecord], selection: str | None) -> list[WorkerRecord]:
    """`all`/None, or a list like `0,2,5-7` of worker indexes; unknown indexes are a usage error."""
    if selection is None or selection.strip().lower() == "all":
        return list(workers)
    by_index = {w.index: w for w in workers}
    chosen: list[int] = []
    for part in selection.split(","):
        part = part.strip().removeprefix("w")
        try:
            if "-" in part:
                low, high = (int(p) for p in part.split("-", 1))
                chosen.extend(range(low, high + 1))
            else:
                chosen.append(int(part))
        except ValueError:
            raise UsageError(f"--worker {selection!r}: expected `all` or indexes like 0,2,5-7") from None
    unknown = sorted(set(chosen) - by_index.keys())
    if unknown:
        valid = f"0-{max(by_index)}" if by_index else "none"
        raise UsageError(f"--worker: no worker {unknown[0]} in this cluster", f"valid indexes: {valid}")
    return [by_index[i] for i in sorted(set(chosen))]


def make_runners(access: ClusterAccess, workers: Sequence[WorkerRecord], *,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 on_new_host_key: Callable[[str, str], None] | None = None) -> list[Runner]:
    """One runner per worker: local directories for the local provider, SSH for everything else."""
    if access.state.provider == "local":
        return [LocalRunner(worker_name(w), Path(w.home or ".")) for w in workers]
    settings = SshSettings(access.key_path, access.known_hosts_path, connect_timeout=connect_timeout)
    known_hosts = KnownHosts(access.known_hosts_path, trust_on_first_use=True, on_new_key=on_new_host_key)
    key = load_private_key(access.key_path)  # once, and a bad key is one error, not one per worker
    return [
        SshRunner(SshTarget(worker_name(w), w.ssh_host, w.ssh_port, access.user), settings, known_hosts, key)
        for w in workers
    ]


# ------------------------------------------------------------------------------------------------ exec


@dataclass(frozen=True)
class ExecReport:
    cluster: str
    results: tuple[RunResult, ...]

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "ok": self.ok, "workers": [r.as_dict() for r in self.results]}


def exec_command(
    ctx: Context,
    name: str | None,
    command: Command,
    *,
    workers: str | None = None,
    timeout: float | None = None,
    on_line: LineHandler | None = None,
    on_new_host_key: Callable[[str, str], None] | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    capture: bool = False,
) -> ExecReport:
    """Run `command` on the chosen workers at once; one result per worker (exit code, duration, error)."""
    access = cluster_access(ctx, name)
    chosen = select_workers(access.workers, workers)
    runners = make_runners(access, chosen, connect_timeout=connect_timeout, on_new_host_key=on_new_host_key)
    results = exec_all(runners, command, timeout=timeout, on_line=on_line, capture=capture,
                       max_parallel=max_parallel)
    return ExecReport(access.state.name, tuple(results))
