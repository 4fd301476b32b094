"""`tpuops guard up|status|logs|down` and `tpuops simulate preempt`: parse, call tpuops.guard, render."""

from __future__ import annotations

import typer

from tpuops.cli.app import CLUSTER_ARGUMENT, JSON_OPTION, PROJECT_OPTION, app
from tpuops.cli.render import console, err_console, print_json

guard_app = typer.Typer(name="guard", no_args_is_help=True, rich_markup_mode=None,
                        help="Recovery that outlives your laptop: the watch loop run by a guard (a small VM, "
                             "or a local process).")
simulate_app = typer.Typer(name="simulate", no_args_is_help=True, rich_markup_mode=None,
                           help="Rehearse what the cloud does to a run (provider: local).")
app.add_typer(guard_app)
app.add_typer(simulate_app)


@guard_app.command("up")
def up(
    name: str = CLUSTER_ARGUMENT,
    zone: str | None = typer.Option(None, "--zone", metavar="ZONE", help="The guard VM's zone (default: the "
                                    "spec's guard.zone, else the TPU's)."),
    machine_type: str | None = typer.Option(None, "--machine-type", metavar="TYPE",
                                            help="The guard VM's machine type (default: guard.machine_type, "
                                                 "e2-micro)."),
    json_: bool = JSON_OPTION,
    project: str | None = PROJECT_OPTION,
) -> None:
    """Start the guard for a cluster's run, or adopt the one running (safe to repeat).

    \b
    Example:
      tpuops guard up my-bert
    """
    from tpuops.context import Context
    from tpuops.ops.guard import guard_up

    info = guard_up(Context.from_env(project=project), name, zone=zone, machine_type=machine_type)
    if json_:
        print_json(info)
        return
    console.print(f"guard: {info.kind} {info.name} {info.state}" + (f" ({info.detail})" if info.detail else ""),
                  markup=False)


@guard_app.command("status")
def status(name: str = CLUSTER_ARGUMENT, json_: bool = JSON_OPTION, project: str | None = PROJECT_OPTION) -> None:
    """Is the guard alive (its heartbeat's age), what it recovered, its last events and its last error.

    \b
    Example:
      tpuops guard status my-bert
    """
    from tpuops.context import Context
    from tpuops.ops.guard import report_of

    cluster, report = report_of(Context.from_env(project=project), name)
    if json_:
        print_json(report)
        return
    if report is None:
        console.print(f"{cluster}: no guard (start one with `tpuops guard up {cluster}`)", markup=False)
        raise typer.Exit(1)
    console.print(f"{cluster} guard: {report.summary()}", markup=False)
    if report.lease is not None:
        import time

        console.print(f"  lease: {report.lease.describe(time.time())}", markup=False)
    for event in report.events:
        console.print(f"  {event.line()}", markup=False)
    if report.last_error is not None:
        role = report.role_to_grant
        grant = f" (grant {role} to the guard's service account)" if role else ""
        console.print(f"  last error: {report.last_error.line()}{grant}", markup=False)
    if report.read_error:
        err_console.print(f"warning: could not read the ledger: {report.read_error}", markup=False)
    if not report.alive:
        raise typer.Exit(1)


@guard_app.command("logs")
def logs(
    name: str = CLUSTER_ARGUMENT,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events (Ctrl-C stops)."),
    json_: bool = typer.Option(False, "--json", help="One JSON object per event."),
) -> None:
    """The guard's events, read from the ledger in the bucket (not from the guard).

    \b
    Example:
      tpuops guard logs my-bert -f
    """
    import json
    from dataclasses import asdict

    from tpuops.context import Context
    from tpuops.ops.guard import guard_events

    try:
        for event in guard_events(Context.from_env(), name, follow):
            print(json.dumps(asdict(event)) if json_ else event.line(), flush=True)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@guard_app.command("down")
def down(name: str = typer.Argument(..., metavar="NAME", help="Cluster name."),
         project: str | None = PROJECT_OPTION) -> None:
    """Stop and delete the guard (the run and the TPU stay; `tpuops down` deletes those, and the guard).

    \b
    Example:
      tpuops guard down my-bert
    """
    from tpuops.context import Context
    from tpuops.ops.guard import guard_down

    stopped = guard_down(Context.from_env(project=project), name)
    console.print(f"{name}: guard {'stopped and deleted' if stopped else 'was not running'}", markup=False)


@simulate_app.command("preempt")
def preempt(
    name: str = CLUSTER_ARGUMENT,
    slice_: int = typer.Option(0, "--slice", metavar="K", help="Multislice: the slice to preempt."),
) -> None:
    """Preempt the cluster's simulated TPU as Google would (provider: local): its hosts' processes end and
    the TPU reads PREEMPTED. How you check that recovery works and your trainer resumes, before paying.

    \b
    Example:
      tpuops simulate preempt quickstart
    """
    from tpuops.context import Context
    from tpuops.ops.guard import simulate_preempt

    node = simulate_preempt(Context.from_env(), name, slice_)
    console.print(f"preempted TPU {node}: `tpuops status` and `tpuops guard logs` show the recovery",
                  markup=False)


@simulate_app.command("stockout")
def stockout(
    zone: str = typer.Argument(..., metavar="ZONE", help="The simulated zone (a pool's zone in a local spec)."),
    for_: str = typer.Option("10m", "--for", metavar="D", help="How long the zone stays out of capacity, e.g. 10m "
                             "(0: it has capacity again now)."),
) -> None:
    """Make a simulated zone refuse to create TPUs for a while (provider: local), as a zone that has run out of
    capacity does: with `simulate preempt`, how you rehearse a run moving to its next pool before paying.

    \b
    Example:
      tpuops simulate stockout sim-east1-a --for 30m && tpuops simulate preempt pools
    """
    from tpuops.context import Context
    from tpuops.durations import parse_duration
    from tpuops.ops.guard import simulate_stockout

    seconds = simulate_stockout(Context.from_env(), zone, parse_duration(for_))
    console.print(f"{zone}: out of capacity for {for_}" if seconds else f"{zone}: has capacity again",
                  markup=False)
