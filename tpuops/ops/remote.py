"""Workflows over a cluster's workers: pick them, connect, exec, and the argv for `tpuops ssh` (push is
`ops/push.py`).

Everything here reaches the cluster through `access/cluster.py` (what `up` left in the state directory: workers,
the key pair, pinned host keys) and hands the work to `tpuops.remote` (runners, fan-out). For a legacy TPU Node
the only SSH target is the client VM (the TPU host itself cannot be reached), which `up` records as a worker
with `role: client_vm`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tpuops.access.cluster import cluster_access, make_runners
from tpuops.access.workers import one_worker, select_workers
from tpuops.context import Context
from tpuops.remote.base import Command, LineHandler, RunResult, command_of_words, command_text
from tpuops.remote.fanout import DEFAULT_MAX_PARALLEL, exec_all

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
