"""Commands on the workers: exec, push, ssh. Parse, call one function in tpuops.ops.remote, render."""

from __future__ import annotations

import threading

import typer

from tpuops.cli.app import CLUSTER_ARGUMENT, JSON_OPTION, PROJECT_OPTION, app, complete_cluster
from tpuops.cli.interrupts import ends_cleanly
from tpuops.cli.progress import PushView
from tpuops.cli.render import console, err_console, fit_table, plural, print_json
from tpuops.remote.base import LineSink, OutputClosed
from tpuops.sizes import size_text

CONNECT_TIMEOUT_OPTION = typer.Option(
    None, "--connect-timeout", metavar="SECONDS", help="Seconds to keep retrying a worker that cannot be reached "
    "(default 60; a worker refusing connections on a cluster up for 5 minutes or more: 5).")


ANSI_COLOURS = ["36", "35", "32", "33", "34", "31", "96", "95"]  # cyan magenta green yellow blue red, bright ×2


class LinePrinter(LineSink):
    """Prints `[w3] line` as lines arrive from many workers: one plain write per network chunk, flushed
    (100k lines cost a fraction of a second), one lock so lines never interleave. A closed stdout raises
    OutputClosed, which stops every worker."""

    def __init__(self) -> None:
        import sys

        self._lock = threading.Lock()
        self._streams = {"stdout": sys.stdout, "stderr": sys.stderr}
        self._colour = {name: _wants_colour(stream) for name, stream in self._streams.items()}
        self._prefixes: dict[tuple[str, str], str] = {}

    def lines(self, worker: str, stream: str, lines: list[str]) -> None:
        prefix = self._prefixes.get((worker, stream))
        if prefix is None:
            prefix = self._prefixes.setdefault((worker, stream), self._prefix(worker, stream))
        text = prefix + ("\n" + prefix).join(lines) + "\n"
        with self._lock:
            try:
                self._streams[stream].write(text)
            except BrokenPipeError:
                raise OutputClosed(stream) from None

    def flush(self) -> None:
        with self._lock:
            for name, stream in self._streams.items():
                try:
                    stream.flush()
                except BrokenPipeError:
                    raise OutputClosed(name) from None

    def _prefix(self, worker: str, stream: str) -> str:
        if not self._colour[stream]:
            return f"[{worker}] "
        colour = ANSI_COLOURS[sum(map(ord, worker)) % len(ANSI_COLOURS)]
        return f"\x1b[{colour}m[{worker}]\x1b[0m "


def _wants_colour(stream) -> bool:  # noqa: ANN001  (a text stream)
    import os

    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def note_new_host_key(worker: str, fingerprint: str) -> None:
    err_console.print(f"{worker}: host key {fingerprint} trusted on first use and recorded", markup=False)


@app.command(name="exec")
def exec_(
    name: str = typer.Argument(..., metavar="NAME", autocompletion=complete_cluster, help="Cluster name."),
    command: list[str] = typer.Argument(..., metavar="CMD",
                                        help="The command, after `--`. One argument is a shell line "
                                        "(pipes, &&, $VARS work); several are an argv, each quoted."),
    worker: str = typer.Option("all", "--worker", "-w", metavar="WORKERS",
                               help="`all`, indexes like 0,2,5-7 (counted across slices), or s1w3 (slice 1's host 3)."),
    slice_: str | None = typer.Option(None, "--slice", metavar="K", help="Multislice: only slice K (or K,L)."),
    timeout: float | None = typer.Option(None, "--timeout", metavar="SECONDS",
                                         help="Stop the command after S seconds."),
    connect_timeout: float | None = CONNECT_TIMEOUT_OPTION,
    parallel: int = typer.Option(32, "--parallel", metavar="N", help="Workers worked on at once."),
    json_: bool = JSON_OPTION,
) -> None:
    """Run a command on all (or chosen) workers at once; output prefixed per worker, then an exit-code table.

    \b
    Examples:
      tpuops exec my-pod -- 'pgrep -af python'      # one argument: a shell line
      tpuops exec my-pod --worker 0,2 -- ls /dev    # several: an argv, each quoted
      tpuops exec my-ms --slice 1 -- hostname       # Multislice: every host of slice 1
    """
    from tpuops.context import Context
    from tpuops.ops.remote import exec_command
    from tpuops.remote.base import command_of_words

    with ends_cleanly(lambda _: "interrupted: the command was signalled to stop on every worker"):
        report = exec_command(
            Context.from_env(), name, command_of_words(command), workers=worker, slices=slice_, timeout=timeout,
            on_line=None if json_ else LinePrinter(), on_new_host_key=note_new_host_key,
            connect_timeout=connect_timeout, max_parallel=parallel, capture=json_,
        )
    if json_:
        print_json(report)
    else:
        print_results_table(report.results)
    if not report.ok:
        raise typer.Exit(report.exit_code)


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
    err_console.print(fit_table(lambda left_out: table, err_console))
    failed = list(dict.fromkeys(r.worker for r in results if not r.ok))  # each worker once, however many rows
    if failed:
        total = len({r.worker for r in results})
        err_console.print(f"[red]{len(failed)} of {total} workers failed:[/] {', '.join(failed)}")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@app.command()
def push(
    name: str | None = CLUSTER_ARGUMENT,
    code_only: bool = typer.Option(False, "--code-only", help="Push the code, not the data."),
    data_only: bool = typer.Option(False, "--data-only", help="Push the data, not the code."),
    connect_timeout: float | None = CONNECT_TIMEOUT_OPTION,
    parallel: int = typer.Option(32, "--parallel", metavar="N", help="Workers worked on at once."),
    json_: bool = JSON_OPTION,
    project: str | None = PROJECT_OPTION,
) -> None:
    """Sync the code (incrementally, by content hash) and the data to every worker or to the bucket.

    \b
    Example:
      tpuops push my-pod --code-only
    """
    from tpuops.context import Context
    from tpuops.errors import UsageError
    from tpuops.ops.push import push as push_cluster

    if code_only and data_only:
        raise UsageError("--code-only and --data-only exclude each other", "give at most one")
    with PushView(enabled=not json_).shown() as view:  # bytes and rate per worker as they move
        report = push_cluster(Context.from_env(project=project), name, code=not data_only, data=not code_only,
                              connect_timeout=connect_timeout, max_parallel=parallel, on_upload=view.upload,
                              on_new_host_key=note_new_host_key, on_progress=view.update)
    if json_:
        print_json(report)
    else:
        print_push_report(report)
    if not report.ok:
        raise typer.Exit(1)


def print_push_report(report) -> None:  # noqa: ANN001  (PushReport; import kept lazy)
    """Per tree: files, size, what changed; then each worker's part (sent from here, relayed, unchanged)."""
    for tree in report.trees:
        statuses: dict[str, list[str]] = {}
        for worker in tree.workers:
            statuses.setdefault(worker.status, []).append(worker.worker)
        summary = "; ".join(f"{status}: {', '.join(names)}" for status, names in statuses.items())
        console.print(f"{tree.dest}: {plural(tree.files, 'file')} ({size_text(tree.total_bytes)}), "
                      f"{tree.changed_files} changed, {size_text(tree.bytes_sent)} sent from here ({summary})",
                      markup=False)
        for worker in tree.workers:
            if worker.bytes_sent:
                console.print(f"  {worker.worker}: {size_text(worker.bytes_sent)} sent in {worker.duration:.1f} s",
                              markup=False)
            if worker.error:
                err_console.print(f"[red]error:[/] {_escape(worker.error)}")
    for upload in report.uploads:
        console.print(f"{upload.url}: {plural(upload.files, 'file')}, {upload.uploaded} uploaded "
                      f"({size_text(upload.bytes_uploaded)}), {upload.skipped} already there", markup=False)
        if upload.error:
            err_console.print(f"[red]error:[/] {_escape(upload.error)}")


@app.command()
def ssh(
    name: str | None = typer.Argument(None, metavar="NAME", autocompletion=complete_cluster,
                                      help="Cluster name (needed when a command follows)."),
    command: list[str] | None = typer.Argument(None, metavar="CMD",
                                               help="A command to run instead of a shell (after `--`)."),
    worker: str = typer.Option("0", "--worker", "-w", metavar="N",
                               help="Worker index (counted across slices), or s1w3 (Multislice: slice 1's host 3)."),
    slice_: str | None = typer.Option(None, "--slice", metavar="K", help="Multislice: slice K's worker (default 0)."),
    forward: list[str] | None = typer.Option(None, "--local-forward", "-L", metavar="PORT:HOST:PORT",
                                             help="Forward a local port, e.g. 6006:localhost:6006."),
    print_only: bool = typer.Option(False, "--print", help="Print the ssh command instead of running it."),
) -> None:
    """Open a shell (or run a command) on one worker with the system OpenSSH client and the cluster's key.

    \b
    Example:
      tpuops ssh my-pod --worker 3 -L 6006:localhost:6006
      tpuops ssh my-ms --worker s1w0                # Multislice: slice 1's first host
    """
    import os
    import shlex

    from tpuops.context import Context
    from tpuops.ops.remote import ssh_argv

    argv = ssh_argv(Context.from_env(), name, worker=worker, slice_=slice_, forwards=forward or [],
                    command=command or [])
    if print_only:
        console.print(shlex.join(argv), markup=False)
        return
    os.execvp(argv[0], argv)  # the user's terminal belongs to ssh now
