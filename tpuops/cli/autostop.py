"""`tpuops autostop NAME 30m|off`: parse, call tpuops.ops.autostop, render."""

from __future__ import annotations

import typer

from tpuops.cli.app import JSON_OPTION, app, complete_cluster
from tpuops.cli.render import console, print_json
from tpuops.errors import TpuopsError


@app.command()
def autostop(
    name: str = typer.Argument(..., metavar="NAME", autocompletion=complete_cluster, help="Cluster name."),
    setting: str = typer.Argument(..., metavar="DURATION|off",
                                  help="Idle time before the TPU is deleted (30m, 2h, 90s), or off."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Change the cost guard of a live cluster: the agent on worker 0 deletes the TPU after this long idle.

    `off` stops the agent and leaves ~/tpuops/NAME/keep-alive on worker 0, so nothing deletes the TPU until a
    new time is given. The setting is kept for this cluster: `launch` refreshes the agent with it.

    \b
    Examples:
      tpuops autostop my-bert 30m
      tpuops autostop my-bert off
    """
    from tpuops.context import Context
    from tpuops.ops.autostop import set_autostop

    change = set_autostop(Context.from_env(), name, setting)
    if json_output:
        print_json(change)
    if change.error is not None:
        raise TpuopsError(f"autostop: {change.error}", f"check that the cluster is up: `tpuops status {name}`")
    if json_output:
        return
    if change.setting == "off":
        console.print(f"{name}: autostop off (agent stopped on {change.worker}; keep-alive file left there)")
    else:
        console.print(f"{name}: autostop set ({change.setting}): the agent on {change.worker} deletes the TPU "
                      f"when idle that long (`tpuops status {name}` shows the time left)")
