"""`tpuops dashboard [--port N] [--host H] [--open]`: parse, start tpuops.dashboard's server, print its URL."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from tpuops.cli.app import PROJECT_OPTION, app
from tpuops.cli.render import console, err_console
from tpuops.errors import UsageError

if TYPE_CHECKING:
    from tpuops.dashboard.board import Board


@app.command()
def dashboard(
    port: int = typer.Option(8765, "--port", "-p", min=0, max=65535, help="Port to listen on (0: any free one)."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDRESS",
                             help="Address to listen on. Anything but loopback lets others on that network read "
                                  "your clusters' state, costs and trainer output."),
    open_browser: bool = typer.Option(False, "--open", help="Open the page in the default browser."),
    project: str | None = PROJECT_OPTION,
) -> None:
    """A local, read-only web page: every cluster (state, cost, autostop, guard, goodput), a cluster's scalars with
    its preemptions, recoveries and hangs, its ledger and incidents, and where the hours went.

    It reads what the CLI reads (local state, the buckets' ledgers and event files, the TPU API), incrementally
    as `logs -f` does, and writes nothing. Ctrl-C stops it.

    \b
    Examples:
      tpuops dashboard --open
      tpuops dashboard --port 9000
    """
    from tpuops.dashboard.server import DashboardServer, is_loopback

    def make_board() -> Board:  # built in the server's thread: the page is served meanwhile
        from tpuops.context import Context
        from tpuops.dashboard.board import Board

        return Board(Context.from_env(project=project))

    if not is_loopback(host):
        err_console.print(f"warning: listening on {host}: anyone who can reach it reads your clusters' state, "
                          "costs and trainer output (there is no login); prefer an SSH tunnel to 127.0.0.1",
                          markup=False)
    try:
        server = DashboardServer((host, port), make_board)
    except OSError as err:
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror or err}",
                         "choose another port with --port N (0: any free one)") from err
    console.print(f"tpuops dashboard on {server.url} (read-only; Ctrl-C stops it)", markup=False)
    if open_browser:
        import webbrowser

        webbrowser.open(server.url)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
