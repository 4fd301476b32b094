"""`tpuops tensorboard`: a local TensorBoard on a cluster's runs. Parse, call tpuops.ops.tensorboard, render."""

from __future__ import annotations

import sys

import typer

from tpuops.cli.app import JSON_OPTION, PROJECT_OPTION, app, complete_cluster
from tpuops.cli.interrupts import terminated_exit
from tpuops.cli.render import print_json_line


@app.command()
def tensorboard(
    name: str | None = typer.Argument(None, metavar="NAME", autocompletion=complete_cluster,
                                      help="Cluster whose spec names the logdir (default: the only one)."),
    port: int = typer.Option(6006, "--port", "-p", metavar="N", help="Local port (0: any free one)."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDRESS",
                             help="Address to listen on (127.0.0.1: this machine only)."),
    run: str | None = typer.Option(None, "--run", metavar="ID|all",
                                   help="Which runs (default: all of the cluster's, each named by its id)."),
    interval: float = typer.Option(5.0, "--interval", min=0.5, metavar="SECONDS",
                                   help="Seconds between two syncs of the logdir."),
    json_: bool = JSON_OPTION,
    project: str | None = PROJECT_OPTION,
) -> None:
    """A local TensorBoard on the cluster's scalars, mirrored incrementally from the bucket and kept current
    while it runs (TensorBoard reads the local copy, not GCS). Ctrl-C stops it.

    \b
    Examples:
      tpuops tensorboard my-bert
      tpuops tensorboard my-bert --port 6007 --run 20261127-102403-0e82
      tpuops tensorboard my-bert --port 0   # any free port; the URL says which
    """
    from tpuops.context import Context
    from tpuops.ops.tensorboard import tensorboard as serve

    def ready(info) -> None:  # noqa: ANN001  (BoardInfo)
        if json_:
            print_json_line(info)
            return
        print(f"TensorBoard at {info.url} on {info.runs} run(s) of {info.cluster} (mirroring {info.logdir} into "
              f"{info.mirror}); Ctrl-C stops it", flush=True)

    try:
        code = serve(Context.from_env(project=project), name, port=port, host=host, run=run, interval=interval,
                     warn=_warn, on_ready=ready)
    except KeyboardInterrupt:
        print("tpuops: TensorBoard stopped", file=sys.stderr, flush=True)
        code = None
    if terminated_exit() is not None:
        raise typer.Exit(terminated_exit())
    if code:
        raise typer.Exit(code)


def _warn(message: str) -> None:
    print(f"tpuops: warning: {message}", file=sys.stderr, flush=True)
