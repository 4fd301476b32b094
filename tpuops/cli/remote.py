"""Commands on the workers: exec, push, ssh. Parse, call one function in tpuops.ops.remote, render."""

from __future__ import annotations

import threading

import typer

from tpuops.cli.app import JSON_OPTION, app
from tpuops.cli.render import console, err_console, print_json

WORKER_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]
CONNECT_TIMEOUT_OPTION = typer.Option(
    60.0, "--connect-timeout", help="Seconds to keep retrying a worker whose sshd is not up yet."
)


class LinePrinter:
    """Prints `[w3] line` as lines arrive from many workers (one lock: lines never interleave)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, worker: str, stream: str, line: str) -> None:
        from rich.text import Text

        target = console if stream == "stdout" else err_console
        colour = WORKER_COLOURS[sum(map(ord, worker)) % len(WORKER_COLOURS)]
        text = Text(f"[{worker}] ", style=colour if target.is_terminal else "")
        text.append(line)
        with self._lock:
            target.print(text, markup=False, emoji=False, crop=False)


def note_new_host_key(worker: str, fingerprint: str) -> None:
    err_console.print(f"{worker}: host key {fingerprint} trusted on first use and recorded", markup=False)


@app.command(name="exec")
def exec_(
    name: str = typer.Argument(..., help="Cluster name."),
    command: list[str] = typer.Argument(..., help="The command, after `--`. One argument is a shell line "
                                        "(pipes, &&, $VARS work); several are an argv, each quoted."),
    worker: str = typer.Option("all", "--worker", "-w", help="`all` or indexes like 0,2,5-7."),
    timeout: float | None = typer.Option(None, "--timeout", help="Stop the command after S seconds."),
    connect_timeout: float = CONNECT_TIMEOUT_OPTION,
    parallel: int = typer.Option(32, "--parallel", help="Workers worked on at once."),
    json_: bool = JSON_OPTION,
) -> None:
    """Run a command on all (or chosen) workers at once; output prefixed per worker, then an exit-code table."""
    from tpuops.context import Context
    from tpuops.ops.remote import exec_command

    shell_or_argv: str | list[str] = command[0] if len(command) == 1 else command
    report = exec_command(
        Context.from_env(), name, shell_or_argv, workers=worker, timeout=timeout,
        on_line=None if json_ else LinePrinter(), on_new_host_key=note_new_host_key,
        connect_timeout=connect_timeout, max_parallel=parallel, capture=json_,
    )
    if json_:
        data = report.as_dict()
        for entry, result in zip(data["workers"], report.results, strict=True):  # type: ignore[arg-type]
            entry["stdout"] = result.stdout.decode("utf-8", "replace")
            entry["stderr"] = result.stderr.decode("utf-8", "replace")
        print_json(data)
    else:
        print_results_table(report.results)
    if not report.ok:
        raise typer.Exit(1)


def print_results_table(results) -> None:  # noqa: ANN001  (Sequence[RunResult]; import kept lazy)
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("worker")
    table.add_column("exit", justify="right")
    table.add_column("time", justify="right")
    table.add_column("error")
    for result in results:
        code = "-" if result.exit_code is None else str(result.exit_code)
        style = "" if result.ok else "red"
        table.add_row(result.worker, f"[{style}]{code}[/]" if style else code, f"{result.duration:.2f}s",
                      _escape(result.error or ""))
    err_console.print(table)
    failed = [r.worker for r in results if not r.ok]
    if failed:
        err_console.print(f"[red]{len(failed)} of {len(results)} workers failed:[/] {', '.join(failed)}")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
