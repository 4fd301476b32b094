"""Commands for runs: launch, stop. Parse, call one function in tpuops.ops.launch, render."""

from __future__ import annotations

import typer

from tpuops.cli.app import JSON_OPTION, app
from tpuops.cli.interrupts import ends_cleanly
from tpuops.cli.remote import LinePrinter, print_results_table
from tpuops.cli.render import console, err_console, print_json
from tpuops.cli.watch import (
    MAX_RESTARTS_OPTION,
    RESTART_ON_FAILURE_OPTION,
    interruptible,
    print_event,
    watch_options,
)


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
        with ends_cleanly(follow_interrupted):
            code = follow_and_wait(ctx, report.cluster, report.run_id, on_line=printer or LinePrinter())
        raise typer.Exit(code)


def follow_interrupted(interrupt: KeyboardInterrupt) -> str:
    """What Ctrl-C while following leaves behind: the run goes on, detached."""
    cluster, run_id = getattr(interrupt, "cluster", None), getattr(interrupt, "run_id", None)
    if not cluster:
        return "stopped following"
    return (f"stopped following; run {run_id} goes on on the workers of {cluster} (it runs detached): "
            f"`tpuops logs {cluster} --workers -f` follows it again, `tpuops stop {cluster}` stops it")


def run_interrupted(interrupt: KeyboardInterrupt) -> str:
    """What Ctrl-C during `run` leaves behind (ops.run.RunInterrupted / TeardownInterrupted)."""
    cluster = getattr(interrupt, "cluster", None)
    run_id = getattr(interrupt, "run_id", None)
    if not hasattr(interrupt, "torn_down"):  # TeardownInterrupted, or Ctrl-C outside run_spec
        if cluster:
            return f"teardown interrupted; `tpuops down {cluster}` deletes what is left"
        return "interrupted"
    if cluster is None:
        return ("interrupted while `up` was creating resources; they are recorded: `tpuops up SPEC` resumes, "
                "`tpuops down SPEC` deletes them")
    if interrupt.torn_down:  # type: ignore[attr-defined]
        stopped = f"stopped run {run_id} and " if run_id else ""
        return f"interrupted: {stopped}deleted the cluster {cluster} (the bucket stays)"
    if run_id:
        return follow_interrupted(interrupt)
    return (f"interrupted before the trainer started; the cluster {cluster} stays: `tpuops launch {cluster}` "
            f"starts it, `tpuops down {cluster}` deletes the cluster")


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


@app.command(name="run")
def run_(
    spec: str = typer.Argument(..., help="The spec file."),
    down: bool = typer.Option(False, "--down", help="Tear everything down afterwards (also after a failure "
                              "or Ctrl-C); the bucket stays."),
    detach: bool = typer.Option(False, "--detach", help="Return once the run has started."),
    wait_for_capacity: str = typer.Option("0", "--wait-for-capacity",
                                          help="Keep retrying this long when the zone has no capacity."),
    watch: bool = typer.Option(False, "--watch", help="Instead of following the output, watch the run and "
                               "recover from preemption (see `tpuops watch`)."),
    max_restarts: int = MAX_RESTARTS_OPTION,
    restart_on_failure: bool = RESTART_ON_FAILURE_OPTION,
    json_: bool = JSON_OPTION,
) -> None:
    """`up`, `launch`, then follow the workers' output and the scalars until the run ends (like `sky launch`)."""
    from tpuops.cli.cluster import parse_duration
    from tpuops.context import Context
    from tpuops.ops.run import run_spec

    ctx = Context.from_env()
    printer = None if json_ else LinePrinter()
    watching = watch_options(ctx.env, max_restarts, restart_on_failure, wait_for_capacity, None, None) \
        if watch else None
    with ends_cleanly(run_interrupted):
        summary = interruptible_if(watch and not down, lambda: run_spec(
            ctx, spec, down=down, detach=detach, wait_for_capacity=parse_duration(wait_for_capacity),
            on_line=printer, on_points=None if json_ else _print_points,
            on_phase=None if json_ else lambda phase: err_console.print(f"[bold]==> {phase}[/]"),
            on_step=None if json_ else lambda step: _show_step(step.name, step.results),
            watch=watching, on_event=print_event,
        ))
    if json_:
        print_json(summary.as_dict())
    else:
        _print_summary(summary)
    raise typer.Exit(summary.exit_code)


def interruptible_if(condition: bool, call):  # noqa: ANN001, ANN201
    """run --watch without --down: Ctrl-C stops watching and deletes nothing (as `tpuops watch`)."""
    return interruptible(call) if condition else call()


def _print_points(points) -> None:  # noqa: ANN001  (list[ScalarPoint])
    """One line per run and poll: the newest value of each tag (the trainer's own output says the rest)."""
    from tpuops.logs.tail import latest_values

    by_run: dict[str, list] = {}
    for point in latest_values(points).values():
        by_run.setdefault(point.run or ".", []).append(point)
    for run, latest in by_run.items():
        values = " ".join(f"{p.tag}={p.value:.4g}" for p in latest)
        console.print(f"[scalars] {run} step {max(p.step for p in latest)}: {values}", markup=False)


def _print_summary(summary) -> None:  # noqa: ANN001  (RunSummary)
    from rich.table import Table

    if summary.failed_step is not None:
        err_console.print(f"[red]{summary.failed_step.name} failed:[/] {'; '.join(summary.failed_step.failures())}")
        return
    if summary.watched is not None:
        watched = summary.watched
        console.print(f"\nRun {watched.run_id} on {summary.cluster}: {watched.reason} (exit {watched.exit_code}, "
                      f"{watched.restarts} restart(s) by this watch, {summary.duration:.1f} s)")
        return
    if not summary.workers:
        console.print(f"Run {summary.run_id} started on {summary.cluster}; follow it with "
                      f"`tpuops logs {summary.cluster} -f`, stop it with `tpuops stop {summary.cluster}`.")
        return
    console.print(f"\nRun {summary.run_id} on {summary.cluster}: {summary.duration:.1f} s")
    print_results_table(summary.workers)
    if summary.last_scalars:
        table = Table(box=None, pad_edge=False, header_style="bold", title="last scalars", title_justify="left")
        for column in ("run", "tag", "step", "value"):
            table.add_column(column)
        for point in summary.last_scalars.values():
            table.add_row(point.run or ".", point.tag, str(point.step), f"{point.value:.6g}")
        console.print(table)
