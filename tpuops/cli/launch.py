"""Commands for runs: launch, stop. Parse, call one function in tpuops.ops.launch, render."""

from __future__ import annotations

import typer

from tpuops.cli.app import CLUSTER_ARGUMENT, JSON_OPTION, PROJECT_OPTION, SPEC_ARGUMENT, YES_OPTION, app
from tpuops.cli.interrupts import ends_cleanly, up_interrupted
from tpuops.cli.progress import ProgressView, PushView, TrainingView
from tpuops.cli.remote import LinePrinter, print_results_table
from tpuops.cli.render import console, err_console, fitted_table, plural, print_json
from tpuops.cli.watch import (
    MAX_RESTARTS_OPTION,
    RESTART_ON_FAILURE_OPTION,
    interruptible,
    print_event,
    watch_options,
)
from tpuops.sizes import size_text

PREFLIGHT_OPTION = typer.Option(False, "--preflight", help="Run `tpuops check` on the spec first (lint, and a "
                                "few steps under XLA on this machine) and stop on any finding.")


@app.command()
def launch(
    name: str = CLUSTER_ARGUMENT,
    command: list[str] = typer.Argument(None, metavar="CMD",
                                        help="Run this instead of trainer.command (after `--`). One argument is a "
                                        "shell line; several are an argv, passed to the trainer exactly as given."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream the workers' output until the run ends."),
    setup: bool = typer.Option(False, "--setup", help="Run trainer.setup even if its text did not change."),
    replace: bool = typer.Option(False, "--replace", help="Stop a run that is still going, then start (a launch "
                                 "in progress elsewhere is waited for, up to 15 min, then replaced)."),
    no_data: bool = typer.Option(False, "--no-data", help="Push code only, not the spec's data."),
    preflight: bool = PREFLIGHT_OPTION,
    json_: bool = JSON_OPTION,
    project: str | None = PROJECT_OPTION,
) -> None:
    """Push, run setup once, free the TPU, and start the trainer detached on every worker.

    \b
    Example:
      tpuops launch my-pod --follow -- python3 train.py --steps 100
    """
    from tpuops.context import Context
    from tpuops.ops.guard import launch_handed_to_guard
    from tpuops.ops.launch import LaunchOptions, follow_and_wait
    from tpuops.remote.base import command_of_words

    ctx = Context.from_env(project=project)
    printer = None if json_ else LinePrinter()
    options = LaunchOptions(command=command_of_words(command) if command else None, force_setup=setup, replace=replace,
                            push_data=not no_data, preflight=preflight)
    pushing = PushView(enabled=not json_)
    with pushing.shown():
        report = launch_handed_to_guard(ctx, name, options, on_line=printer, on_push=pushing.update,
                                        on_step=None if json_ else lambda step: _show_step(step.name, step.results,
                                                                                          pushing))
    if json_:
        print_json(report)
    if not report.ok:
        raise typer.Exit(1)
    if not json_:
        console.print(f"Run [bold]{report.run_id}[/] started on {plural(len(report.steps[-1].results), 'worker')}. "
                      f"Follow its output: tpuops logs {report.cluster} --workers -f; its scalars: "
                      f"tpuops logs {report.cluster} -f")
        if report.autostop is not None and not report.autostop.started:
            err_console.print(f"warning: autostop: the agent did not start ({report.autostop.error})", markup=False)
        if report.guard_trouble is not None:
            err_console.print(f"warning: guard: {report.guard_trouble}", markup=False)
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
        during_up = getattr(interrupt, "during_up", None)
        if during_up is not None and (during_up.withdrawn or during_up.left_behind):
            return up_interrupted(during_up)
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
    name: str = CLUSTER_ARGUMENT,
    run: str | None = typer.Option(None, "--run", metavar="RUN_ID", help="Run id (default: the current run)."),
    json_: bool = JSON_OPTION,
) -> None:
    """Stop the run on every worker, its setup or trainer and all they started (TERM, grace, KILL); free the TPU.

    \b
    Example:
      tpuops stop my-pod
    """
    from tpuops.context import Context
    from tpuops.ops.launch import stop as stop_run

    report = stop_run(Context.from_env(), name, run)
    if json_:
        print_json(report)
    else:
        for step in report.steps:
            _show_step(step.name, step.results)
        said = report.said()  # e.g. "stopped setup of run ...", "... ignored TERM for 10 s: KILLed"
        for worker, state in report.worker_states.items():
            console.print(f"{worker}: {state}" + (f" ({said[worker]})" if worker in said else ""), markup=False)
    if not report.ok:
        raise typer.Exit(1)


def _show_step(name: str, results, pushing: PushView | None = None) -> None:  # noqa: ANN001  (Sequence[RunResult])
    if name == "push" and pushing is not None:
        pushing.finish()  # the live table goes (in a pipe: each worker's line) before the step's own line
    failed = [r for r in results if not r.ok]
    if failed or name in ("setup",):
        err_console.print(f"[bold]{name}[/]")
        print_results_table(results)
    elif name == "push":
        err_console.print(push_line(results), markup=False)
    else:
        err_console.print(f"{name}: ok on {plural(len(results), 'worker')}", markup=False)


def push_line(results) -> str:  # noqa: ANN001  (Sequence[RunResult]: one per worker and tree, one per upload)
    """`push: ok on 2 workers (w0 1.2 MiB, w1 1.2 MiB sent), 1 upload`: workers counted once, not per tree."""
    sent: dict[str, int] = {}
    uploads = 0
    for result in results:
        if result.worker.startswith("upload "):
            uploads += 1
        else:
            sent[result.worker] = sent.get(result.worker, 0) + result.bytes_sent
    detail = ", ".join(f"{worker} {size_text(count)}" for worker, count in sent.items() if count)
    text = f"push: ok on {plural(len(sent), 'worker')}" + (f" ({detail} sent)" if detail else " (nothing changed)")
    return text + (f", {plural(uploads, 'upload')}" if uploads else "")


@app.command(name="run")
def run_(
    spec: str = SPEC_ARGUMENT,
    down: bool = typer.Option(False, "--down", help="Tear everything down afterwards (also after a failure "
                              "or Ctrl-C); the bucket stays."),
    detach: bool = typer.Option(False, "--detach", help="Return once the run has started."),
    wait_for_capacity: str = typer.Option("0", "--wait-for-capacity", metavar="DURATION",
                                          help="Keep retrying this long when the zone has no capacity, e.g. 2h."),
    watch: bool = typer.Option(False, "--watch", help="Instead of following the output, watch the run and "
                               "recover from preemption (see `tpuops watch`)."),
    max_restarts: int = MAX_RESTARTS_OPTION,
    restart_on_failure: bool = RESTART_ON_FAILURE_OPTION,
    preflight: bool = PREFLIGHT_OPTION,
    guard: bool = typer.Option(None, "--guard/--no-guard", help="Also start the guard, so the run is recovered "
                               "after a preemption with no laptop awake (default: the spec's guard.enabled)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Every output line and scalar point, as in a pipe, "
                                 "instead of a live progress line (step, steps/s, ETA, loss) on a terminal."),
    json_: bool = JSON_OPTION,
    yes: bool = YES_OPTION,
    project: str | None = PROJECT_OPTION,
) -> None:
    """`up`, `launch`, then follow the workers' output and the scalars until the run ends (like `sky launch`).
    On a terminal, a live line shows the run's progress (`--verbose`: every raw line instead).

    \b
    Example:
      tpuops run examples/quickstart.yaml --down
    """
    from tpuops.context import Context
    from tpuops.durations import parse_duration
    from tpuops.ops.run import run_spec

    ctx = Context.from_env(project=project, assume_yes=yes)
    training = TrainingView(key="run") if not json_ and not watch and TrainingView.wanted(verbose) else None
    printer = None if json_ else training or LinePrinter()
    watching = watch_options(ctx.env, max_restarts, restart_on_failure, wait_for_capacity, None, None) \
        if watch else None
    view = ProgressView(enabled=not json_)  # what up creates or keeps (and down deletes), as it happens
    pushing = PushView(enabled=not json_)  # bytes and rate per worker while launch pushes

    def show_phase(phase: str) -> None:
        view.stop()
        err_console.print(f"[bold]==> {phase}[/]")
        if phase in ("up", "down"):
            view.start()

    with ends_cleanly(run_interrupted):
        try:
            summary = interruptible_if(watch and not down, lambda: run_spec(
                ctx, spec, down=down, detach=detach, wait_for_capacity=parse_duration(wait_for_capacity),
                on_line=printer, on_points=None if json_ else training.points if training else _print_points,
                on_phase=None if json_ else show_phase,
                on_step=None if json_ else lambda step: _show_step(step.name, step.results, pushing),
                watch=watching, on_event=print_event, on_progress=view.update, preflight=preflight, guard=guard,
                on_push=pushing.update,
            ))
        finally:
            pushing.finish()
            view.stop()
            if training is not None:
                training.stop()
    if json_:
        print_json(summary)
    else:
        if training is not None:  # a failed setup or trainer: what it said last (its lines were not shown)
            failed_step = summary.failed_step.results if summary.failed_step is not None else ()
            _print_failed_tails(training, [*failed_step, *(summary.workers or ())])
        _print_summary(summary)
    raise typer.Exit(summary.exit_code)


def _print_failed_tails(training: TrainingView, results) -> None:  # noqa: ANN001  (Sequence[RunResult])
    """The raw lines were not shown (the live line was): a worker that failed says its last ones now."""
    for worker in dict.fromkeys(result.worker for result in results if not result.ok):  # each worker once
        tail = training.tail_of(worker)
        if tail:
            err_console.print(f"last lines of {worker}:", markup=False)
            err_console.print("\n".join(f"  {line}" for line in tail), markup=False, highlight=False)


def interruptible_if(condition: bool, call):  # noqa: ANN001, ANN201
    """run --watch without --down: Ctrl-C stops watching and deletes nothing (as `tpuops watch`)."""
    return interruptible(call) if condition else call()


def _top_level(run: str) -> bool:
    """Events right in the logdir (the run is called "."): the run is the cluster's own, no name to show."""
    return run in ("", ".")


def _print_points(points) -> None:  # noqa: ANN001  (list[ScalarPoint])
    """One line per run and poll: the newest value of each tag (the trainer's own output says the rest)."""
    from tpuops.logs.tail import latest_values

    by_run: dict[str, list] = {}
    for point in latest_values(points).values():
        by_run.setdefault(point.run, []).append(point)
    for run, latest in by_run.items():
        values = " ".join(f"{p.tag}={p.value:.4g}" for p in latest)
        where = "" if _top_level(run) else f"{run} "
        console.print(f"[scalars] {where}step {max(p.step for p in latest)}: {values}", markup=False)


def _print_summary(summary) -> None:  # noqa: ANN001  (RunSummary)
    from tpuops.ops.run import still_up

    if summary.failed_step is not None:
        err_console.print(f"[red]{summary.failed_step.name} failed:[/] {'; '.join(summary.failed_step.failures())}")
        err_console.print(f"the cluster {summary.cluster} was deleted (--down; the bucket stays)" if summary.torn_down
                          else still_up(summary.cluster), markup=False)
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
        named_runs = not all(_top_level(point.run) for point in summary.last_scalars.values())
        rows = [(point.run, point.tag, str(point.step), f"{point.value:.6g}")[0 if named_runs else 1:]
                for point in summary.last_scalars.values()]
        one_run = len({point.run for point in summary.last_scalars.values()}) == 1  # its id is in the line above
        console.print(fitted_table(console, ("run", "tag", "step", "value")[0 if named_runs else 1:], rows,
                                   optional=("run",) if one_run else (), box=None, pad_edge=False,
                                   header_style="bold", title="last scalars", title_justify="left"))
