"""`tpuops watch`: parse, call tpuops.ops.watch, print each event with its time."""

from __future__ import annotations

import os
import sys

import typer

from tpuops.cli.app import CLUSTER_ARGUMENT, JSON_OPTION, PROJECT_OPTION, YES_OPTION, app
from tpuops.cli.interrupts import interrupted_exit
from tpuops.cli.render import err_console, print_json

MAX_RESTARTS_OPTION = typer.Option(10, "--max-restarts", metavar="N", help="Give up after this many recoveries.")
RESTART_ON_FAILURE_OPTION = typer.Option(
    False, "--restart-on-failure", help="Also relaunch a trainer that failed by itself (non-zero exit, TPU fine).")
INTERVAL_OPTION = typer.Option(None, "--interval", metavar="DURATION",
                               help="Poll this often (default 30s, or TPUOPS_WATCH_INTERVAL).")
GRACE_OPTION = typer.Option(None, "--unhealthy-grace", metavar="DURATION",
                            help="Recover when the TPU stays UNHEALTHY (or workers unreachable) this long "
                                 "(default 10m).")


@app.command()
def watch(
    name: str = CLUSTER_ARGUMENT,
    max_restarts: int = MAX_RESTARTS_OPTION,
    restart_on_failure: bool = RESTART_ON_FAILURE_OPTION,
    wait_for_capacity: str = typer.Option("0", "--wait-for-capacity", metavar="DURATION",
                                          help="When recreating, keep retrying this long if there is no capacity."),
    interval: str = INTERVAL_OPTION,
    unhealthy_grace: str = GRACE_OPTION,
    down: bool = typer.Option(False, "--down", help="Tear down when the run has ended (not after Ctrl-C); "
                              "the bucket stays."),
    headless: bool = typer.Option(False, "--headless", help="Run as the guard (no terminal; what `tpuops guard "
                                  "up` starts): events go to the ledger in the bucket, one line each to stdout."),
    json_: bool = JSON_OPTION,
    yes: bool = YES_OPTION,
    project: str | None = PROJECT_OPTION,
) -> None:
    """Stay attached to the run: on preemption delete and recreate the TPU, push, and relaunch (resume).

    \b
    While a guard (`tpuops guard up`) holds the run's lease, this prints the guard's events instead and
    deletes or creates nothing; it takes over if the guard falls silent.

    \b
    Example:
      tpuops watch my-bert --max-restarts 20
    """
    from tpuops.context import Context
    from tpuops.ops.guard_loop import ROLE_GUARD, ROLE_WATCH, watch_with_lease

    ctx = Context.from_env(project=project, assume_yes=yes)
    options = watch_options(ctx.env, max_restarts, restart_on_failure, wait_for_capacity, interval,
                            unhealthy_grace, down)
    role = ROLE_GUARD if headless else ROLE_WATCH
    # systemd and `guard down` stop a headless watch with SIGTERM: cli/main.py's signals_interrupt makes that a
    # Ctrl-C (the lease released), and the exit code says which signal it was (143).
    on_event = print_line if headless else print_event
    result = interruptible(lambda: watch_with_lease(ctx, name, options, role=role, on_event=on_event))
    if json_:
        print_json(result)
    raise typer.Exit(result.exit_code)


def watch_options(env, max_restarts: int, restart_on_failure: bool, wait_for_capacity: str,  # noqa: ANN001
                  interval: str | None, unhealthy_grace: str | None, down: bool = False):  # noqa: ANN201
    """WatchOptions from the command line (durations like 30s, 10m), the environment filling the gaps."""
    from tpuops.durations import parse_duration
    from tpuops.ops.watch import WatchOptions

    return WatchOptions.from_env(
        env, max_restarts=max_restarts, restart_on_failure=restart_on_failure, down=down,
        wait_for_capacity=parse_duration(wait_for_capacity),
        poll_interval=parse_duration(interval) if interval else None,
        unhealthy_grace=parse_duration(unhealthy_grace) if unhealthy_grace else None,
    )


def print_event(at: str, kind: str, message: str) -> None:
    err_console.print(f"{at} [bold]{kind}[/]: {message}", highlight=False)


def print_line(at: str, kind: str, message: str) -> None:
    """The guard's log (a file, or the journal): plain lines, flushed at once."""
    print(f"{at} {kind}: {message}", flush=True)


def interruptible(watch_call):  # noqa: ANN001, ANN201
    """Ctrl-C stops watching at once and deletes nothing (state is saved before every change)."""
    try:
        return watch_call()
    except KeyboardInterrupt:
        print("tpuops: stopped watching; nothing was deleted. The run (if alive) goes on: "
              "`tpuops watch` attaches again, `tpuops down` deletes everything", file=sys.stderr, flush=True)
        os._exit(interrupted_exit())  # threads of an interrupted `up` or push would block a normal exit
