"""Workflows over a cluster's workers: pick them, connect, exec, and the argv for `tpuops ssh` (push is
`ops/push.py`).

Everything here reads what `up` left in the state directory (workers, the key pair, pinned host keys)
and hands the work to `tpuops.remote` (runners, fan-out). For a legacy TPU Node the only SSH target
is the client VM (the TPU host itself cannot be reached), which `up` records as a worker with
`role: client_vm`.
"""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuops import catalog
from tpuops.context import Context
from tpuops.errors import SpecError, TpuopsError, UsageError
from tpuops.guard.autostop.client import deletion_record
from tpuops.guard.handback import with_guard_state
from tpuops.ops.workers import one_worker, select_workers, ssh_targets, worker_targets
from tpuops.providers.base import Login, Provider
from tpuops.remote.base import Command, LineHandler, Runner, RunResult, command_of_words, command_text
from tpuops.remote.fanout import DEFAULT_MAX_PARALLEL, exec_all
from tpuops.spec import Spec, load_spec
from tpuops.state import ClusterState, WorkerRecord, epoch_seconds

KEY_FILE = "id_ed25519"
KNOWN_HOSTS_FILE = "known_hosts"
DEFAULT_CONNECT_TIMEOUT = 60.0
# A worker whose VM has been up this long has had time to start sshd: if it refuses connections, say so
# after REFUSED_TIMEOUT instead of retrying for the whole connect timeout (meant for workers just booted).
SETTLED_AFTER_SECONDS = 300.0
REFUSED_TIMEOUT = 5.0


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one cluster's workers, as `up` left it."""

    state: ClusterState
    spec: Spec | None
    workers: tuple[WorkerRecord, ...]  # the SSH targets (all TPU workers, or the client VM of a legacy Node)
    user: str
    key_path: Path
    known_hosts_path: Path
    provider: Provider

    @property
    def login(self) -> Login:
        return Login(self.user, self.key_path, self.known_hosts_path)


def resolve_name(ctx: Context, name: str | None, otherwise: str | None = None) -> str:
    """The cluster a command is about: the one given, else the only one there is. `otherwise` names the
    command's way to do without a cluster, for the hints."""
    if name:
        return name
    names = ctx.store.names()
    if len(names) == 1:
        return names[0]
    alternative = f", or {otherwise}" if otherwise else ""
    if not names:
        raise UsageError("no clusters here", f"create one with `tpuops up SPEC`{alternative}")
    raise UsageError(f"several clusters here ({', '.join(names)})", f"name the one you mean{alternative}")


def cluster_access(ctx: Context, name: str | None, *, need_spec: bool = False) -> ClusterAccess:
    """A command's way in, from the cluster's name: its state and spec read here (the state with what the
    cluster's guard VM changed, such as the workers of a TPU it re-created)."""
    state = ctx.store.require(resolve_name(ctx, name))
    spec = _load_spec(state, required=need_spec)
    return access_for(ctx, with_guard_state(ctx, state, spec), spec)


def access_for(ctx: Context, state: ClusterState, spec: Spec | None) -> ClusterAccess:
    """The way in for a caller that already holds the state and the spec (`up`, `status`, `down`): nothing is
    read again."""
    targets = ssh_targets(state)
    if not targets:
        raise UsageError(
            f"cluster '{state.name}' has no workers recorded", "run `tpuops up SPEC` (or `tpuops status`) first"
        )
    user = state.ssh_user or (spec.ssh.user if spec and spec.ssh.user else None) or getpass.getuser()
    cluster_dir = ctx.store.cluster_dir(state.name)
    return ClusterAccess(state, spec, tuple(targets), user, cluster_dir / KEY_FILE, cluster_dir / KNOWN_HOSTS_FILE,
                         ctx.provider_for(spec, state))


def _refuse_if_autostopped(access: ClusterAccess) -> None:
    """Before connecting (a minute of SSH timeouts otherwise): the autostop agent's record that it deleted the TPU,
    one read of the bucket when autostop is on."""
    try:
        record = deletion_record(access.provider, access.state, access.spec)
    except TpuopsError:
        return  # the bucket unreadable: the connection will tell
    if record is not None:
        raise TpuopsError(f"the TPU of '{access.state.name}' is gone: {record.line()}",
                          f"`tpuops up {access.state.spec_path}` brings it back (the bucket and its data stayed)")


def _load_spec(state: ClusterState, required: bool) -> Spec | None:
    try:
        return load_spec(state.spec_path)
    except SpecError:
        if required:
            raise
        return None  # exec and ssh only need the state; a moved spec must not stop them


def make_runners(access: ClusterAccess, workers: Sequence[WorkerRecord], *,
                 connect_timeout: float | None = None,
                 on_new_host_key: Callable[[str, str], None] | None = None) -> list[Runner]:
    """One runner per worker, as the cluster's provider reaches them.

    connect_timeout None: up to a minute for workers that may still be booting, and a few seconds for a
    refusing worker of a cluster that has been up a while; a number: that long, whatever the refusal.
    """
    _refuse_if_autostopped(access)
    refused_timeout = None
    if connect_timeout is None:
        connect_timeout = DEFAULT_CONNECT_TIMEOUT
        up_for = seconds_up(access.state)
        if up_for is not None and up_for >= SETTLED_AFTER_SECONDS:
            refused_timeout = REFUSED_TIMEOUT
    return access.provider.runners(worker_targets(workers), access.login, connect_timeout=connect_timeout,
                                   refused_timeout=refused_timeout, on_new_host_key=on_new_host_key)


def tpu_paths(access: ClusterAccess, spec: Spec) -> tuple[str, str]:
    """The device files the TPU runtime holds open for this generation, and libtpu's lock file."""
    accelerator = catalog.load().accelerator(spec.tpu.type)
    vfio = accelerator is not None and accelerator.generation.name in ("v5litepod", "v5p", "v6e")
    return access.provider.tpu_paths(vfio)


def seconds_up(state: ClusterState) -> float | None:
    """How long ago `up` last saw the SSH targets' machine ready (the TPU, or a legacy Node's client VM);
    None when it never recorded that."""
    kinds = ("client_vm",) if any(w.role == "client_vm" for w in state.workers) else ("tpu", "queued_resource")
    times = [epoch_seconds(r.updated_at) for r in state.resources if r.kind in kinds and r.status == "created"]
    if not times or None in times:
        return None
    return time.time() - max(t for t in times if t is not None)


# ------------------------------------------------------------------------------------------------ exec


@dataclass(frozen=True)
class ExecReport:
    cluster: str
    results: tuple[RunResult, ...]
    captured: bool = False  # the output was kept (exec --json) rather than streamed

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    @property
    def exit_code(self) -> int:
        """As `ssh` would exit: 0 when every worker succeeded; when the failing workers all failed alike, the
        command's own code (255 if none could run it, as ssh says for a connection failure); else 1."""
        if self.ok:
            return 0
        codes = {r.exit_code for r in self.results if not r.ok}
        if len(codes) != 1:
            return 1
        code = codes.pop()
        if code is None:
            return 255
        return code if code != 0 else 1  # exit 0 with an error (e.g. input not sent): still a failure

    def as_dict(self) -> dict[str, object]:
        workers = [r.as_dict() for r in self.results]
        if self.captured:
            for entry, result in zip(workers, self.results, strict=True):
                entry["stdout"] = result.stdout.decode("utf-8", "replace")
                entry["stderr"] = result.stderr.decode("utf-8", "replace")
        return {"cluster": self.cluster, "ok": self.ok, "exit_code": self.exit_code, "workers": workers}


def exec_command(
    ctx: Context,
    name: str | None,
    command: Command,
    *,
    workers: str | None = None,
    slices: str | None = None,
    timeout: float | None = None,
    on_line: LineHandler | None = None,
    on_new_host_key: Callable[[str, str], None] | None = None,
    connect_timeout: float | None = None,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    capture: bool = False,
) -> ExecReport:
    """Run `command` on the chosen workers at once; one result per worker (exit code, duration, error)."""
    access = cluster_access(ctx, name)
    chosen = select_workers(access.workers, workers, slices)
    runners = make_runners(access, chosen, connect_timeout=connect_timeout, on_new_host_key=on_new_host_key)
    results = exec_all(runners, command, timeout=timeout, on_line=on_line, capture=capture,
                       max_parallel=max_parallel)
    return ExecReport(access.state.name, tuple(results), captured=capture)


# ------------------------------------------------------------------------------------------------ push


def ssh_argv(ctx: Context, name: str | None, *, worker: str | int = 0, slice_: str | None = None,
             forwards: Sequence[str] = (), command: Sequence[str] = (), ssh_binary: str = "ssh") -> list[str]:
    """The system OpenSSH command line for one worker: the cluster's key, its known_hosts, keep-alives.

    New host keys are accepted and recorded in the cluster's known_hosts (as our own runner does);
    changed ones are refused by ssh itself (`StrictHostKeyChecking=accept-new`).
    """
    access = cluster_access(ctx, name)
    access.provider.require_ssh(access.state.name)
    [target] = one_worker(access.workers, str(worker), slice_)
    from tpuops.remote.ssh import load_private_key  # paramiko: only for the commands that connect

    load_private_key(access.key_path)  # same checks (exists, 0600) and message as exec and push
    argv = [
        ssh_binary,
        "-i", str(access.key_path),
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={access.known_hosts_path}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", "HashKnownHosts=no",
        "-o", "ServerAliveInterval=30",
        "-o", "ServerAliveCountMax=4",
        "-o", "ConnectTimeout=20",
        "-p", str(target.ssh_port),
        "-l", access.user,
    ]
    for spec in forwards:
        argv += ["-L", spec]
    argv.append(target.ssh_host)
    if command:
        # ssh joins its arguments with spaces for the remote shell: as with exec, one argument is a shell
        # line, several are an argv quoted one by one so that they arrive as given.
        argv += ["--", command_text(command_of_words(command))]
    return argv
