"""`tpuops ssh-config`: Host blocks for the system OpenSSH tools. Parse, call tpuops.ops.ssh_config, render."""

from __future__ import annotations

import typer

from tpuops.cli.app import JSON_OPTION, app, complete_cluster
from tpuops.cli.render import console, err_console, print_json


@app.command(name="ssh-config")
def ssh_config(
    names: list[str] | None = typer.Argument(None, metavar="[NAME ...]", autocompletion=complete_cluster,
                                             help="Clusters to write (default: every cluster here)."),
    json_: bool = JSON_OPTION,
) -> None:
    """Write a `Host tpuops-NAME-wN` block per worker (key, pinned known_hosts, user, port) for ssh, scp, rsync and
    VS Code Remote, and print the one `Include` line to add at the top of ~/.ssh/config (tpuops never edits it).
    `tpuops up` keeps the blocks current.

    \b
    Examples:
      tpuops ssh-config my-pod
      ssh tpuops-my-pod-w0
      rsync -a tpuops-my-pod-w0:checkpoints/ ./checkpoints/
    """
    from tpuops.context import Context
    from tpuops.ops.ssh_config import write_ssh_config

    report = write_ssh_config(Context.from_env(), names or [])
    if json_:
        print_json(report)
        return
    for host in report.hosts:
        note = "" if host.pinned else "  (host key not pinned yet: run `tpuops exec " + host.cluster + " -- true` once)"
        console.print(f"{host.alias}  {host.address}{note}", markup=False)
    for skipped in report.skipped:
        err_console.print(f"skipped {skipped}", markup=False)
    console.print(f"add this line at the top of ~/.ssh/config (once):\n{report.include}", markup=False)
