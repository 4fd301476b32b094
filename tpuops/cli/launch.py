"""Commands for runs: launch, stop. Parse, call one function in tpuops.ops.launch, render."""

from __future__ import annotations

import typer

from tpuops.cli.app import JSON_OPTION, app
from tpuops.cli.remote import LinePrinter, print_results_table
from tpuops.cli.render import console, err_console, print_json


@app.command()
def launch(
    name: str = typer.Argument(None, help="Cluster name (default: the only cluster)."),
    command: list[str] = typer.Argument(None, help="Run this instead of trainer.command (after `--`)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream the workers' output until the run ends."),
    setup: bool = typer.Option(False, "--setup", help="Run trainer.setup even if its text did not change."),
    replace: bool = typer.Option(False, "--replace", help="Stop a run that is still going, then start."),
    no_data: bool = typer.Option(False, "--no-data", help="Push code only, not the spec's data."),
    json_: bool = JSON_OPTION,
) -> None:
    """Push, run setup once, free the TPU, and start the trainer detached on every worker."""
    from tpuops.context import Context
    from tpuops.ops.launch import LaunchOptions, follow_and_wait, launch_run

    ctx = Context.from_env()
    printer = None if json_ else LinePrinter()
    options = LaunchOptions(command=" ".join(command) if command else None, force_setup=setup, replace=replace,
                            push_data=not no_data)
    report = launch_run(ctx, name, options, on_line=printer,
                        on_step=None if json_ else lambda step: _show_step(step.name, step.results))
    if json_:
        print_json(report.as_dict())
    if not report.ok:
        raise typer.Exit(1)
    if not json_:
        console.print(f"Run [bold]{report.run_id}[/] started on {len(report.steps[-1].results)} worker(s). "
                      f"Follow: tpuops launch --follow, or tpuops logs {report.cluster} --workers")
    if follow:
        code = follow_and_wait(ctx, report.cluster, report.run_id, on_line=printer or LinePrinter())
        raise typer.Exit(code)


@app.command()
def stop(
    name: str = typer.Argument(None, help="Cluster name (default: the only cluster)."),
    run: str | None = typer.Option(None, "--run", help="Run id (default: the current run)."),
    json_: bool = JSON_OPTION,
) -> None:
    """Stop the run's process group on every worker (TERM, grace period, KILL) and free the TPU."""
    from tpuops.context import Context
    from tpuops.ops.launch import stop as stop_run

    report = stop_run(Context.from_env(), name, run)
    if json_:
        print_json({"cluster": report.cluster, "run_id": report.run_id, "ok": report.ok,
                    "workers": report.worker_states})
    else:
        for step in report.steps:
            _show_step(step.name, step.results)
        for worker, state in report.worker_states.items():
            console.print(f"{worker}: {state}")
    if not report.ok:
        raise typer.Exit(1)


def _show_step(name: str, results) -> None:  # noqa: ANN001  (Sequence[RunResult])
    failed = [r for r in results if not r.ok]
    if failed or name in ("setup",):
        err_console.print(f"[bold]{name}[/]")
        print_results_table(results)
    else:
        err_console.print(f"{name}: ok on {len(results)} worker(s)")
