"""Files back from the workers: `tpuops pull`. Parse, call tpuops.ops.pull, render."""

from __future__ import annotations

from pathlib import Path

import typer

from tpuops.cli.app import JSON_OPTION, app, complete_cluster
from tpuops.cli.interrupts import ends_cleanly
from tpuops.cli.progress import PullView
from tpuops.cli.remote import CONNECT_TIMEOUT_OPTION, note_new_host_key
from tpuops.cli.render import console, err_console, plural, print_json
from tpuops.sizes import size_text


@app.command()
def pull(
    name: str = typer.Argument(..., metavar="NAME", autocompletion=complete_cluster, help="Cluster name."),
    remote: str = typer.Argument(..., metavar="REMOTE_PATH",
                                 help="A file or directory on the worker (relative to its home, or absolute; "
                                      "quote a leading ~ so your shell leaves it alone)."),
    local: Path = typer.Argument(Path("."), metavar="[LOCAL]", help="The local directory to pull into (default: .)."),
    worker: str = typer.Option("0", "--worker", "-w", metavar="N|all",
                               help="Which worker (default 0); `all` (or a list like 0,2): one folder per worker, "
                                    "LOCAL/w0, LOCAL/w1, ..."),
    connect_timeout: float | None = CONNECT_TIMEOUT_OPTION,
    parallel: int = typer.Option(32, "--parallel", metavar="N", help="Workers worked on at once."),
    json_: bool = JSON_OPTION,
) -> None:
    """Copy a file or directory from the workers into LOCAL/BASENAME, incrementally and resumably.

    Files whose local copy has the worker's size and mtime are skipped; an interrupted pull continues where it
    stopped. Names that would leave LOCAL (.., absolute, symlinks pointing outside) are refused.

    \b
    Examples:
      tpuops pull my-pod '~/checkpoints/step_1000' ./ckpt
      tpuops pull my-pod profile.json --worker all     # ./w0/profile.json, ./w1/profile.json, ...
    """
    from tpuops.context import Context
    from tpuops.ops.pull import pull as pull_files

    with ends_cleanly(lambda _: "interrupted: what was copied is kept; run the same pull again to finish it"), \
            PullView(enabled=not json_).shown() as view:
        report = pull_files(Context.from_env(), name, remote, local, worker=worker, connect_timeout=connect_timeout,
                            max_parallel=parallel, on_new_host_key=note_new_host_key, on_progress=view.update)
    if json_:
        print_json(report)
    else:
        print_pull_report(report)
    if not report.ok:
        raise typer.Exit(1)


def print_pull_report(report) -> None:  # noqa: ANN001  (PullReport; import kept lazy)
    import shlex

    from rich.markup import escape

    for part in report.workers:
        if part.error:
            err_console.print(f"[red]error:[/] {escape(part.error)}")
            continue
        console.print(f"{part.worker}: {report.remote} -> {part.dest}: {plural(part.files, 'file')}, "
                      f"{part.fetched} copied ({size_text(part.bytes_fetched)} in {part.duration:.1f} s), "
                      f"{part.unchanged} unchanged", markup=False)
        for refused in part.refused:
            err_console.print(f"[red]refused:[/] {part.worker}: {escape(refused)}")
    failed = [part for part in report.workers if part.error]
    if failed:
        worker = failed[0].worker.lstrip("w")
        look = f"tpuops exec {report.cluster} --worker {worker} -- ls -la {shlex.quote(report.remote)}"
        err_console.print(f"hint: the path is the worker's, relative to its home (`{look}` shows what is there); "
                          "what was copied is kept, and the same pull again finishes it", markup=False)
    if any(part.refused for part in report.workers):
        err_console.print("hint: those names would be written outside the destination; copy them by hand if you "
                          f"trust them (`tpuops ssh {report.cluster} -- cat PATH`)", markup=False)
