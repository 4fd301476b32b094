"""`tpuops up`, `status`, `down`: parse, call one ops function, render."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from tpuops.cli.app import JSON_OPTION, PROJECT_OPTION, SPEC_ARGUMENT, YES_OPTION, app, complete_cluster
from tpuops.cli.interrupts import ends_cleanly, up_interrupted
from tpuops.cli.progress import ProgressView
from tpuops.cli.render import console, err_console, print_json
from tpuops.durations import parse_duration
from tpuops.errors import UsageError
from tpuops.sizes import size_text

if TYPE_CHECKING:
    from tpuops.state import WorkerRecord

ZONE_OPTION = typer.Option([], "--zone", metavar="ZONE",
                           help="Without local state: search only this zone (repeatable) instead of every zone.")


@app.command()
def up(
    spec: str = SPEC_ARGUMENT,
    wait_for_capacity: str = typer.Option(
        "0", "--wait-for-capacity", metavar="DURATION",
        help="Keep retrying (and trying tpu.zones) this long when a zone has no capacity, e.g. 2h.",
    ),
    autostop: str = typer.Option(
        None, "--autostop", metavar="DURATION",
        help="Delete the TPU after this long idle (no run, nothing holding the TPU), e.g. 30m (with its unit: "
             "10 alone is refused); off to disable. Kept for this cluster until changed.",
    ),
    guard: bool = typer.Option(None, "--guard/--no-guard", help="Also start the guard (recovery that outlives "
                               "your laptop; default: the spec's guard.enabled)."),
    json_output: bool = JSON_OPTION,
    yes: bool = YES_OPTION,
    project: str = PROJECT_OPTION,
) -> None:
    """Create or adopt everything the spec asks for (idempotent, resumable).

    \b
    Example:
      tpuops up spec.yaml --wait-for-capacity 2h --autostop 30m
    """
    from tpuops.context import Context
    from tpuops.ops.autostop import parse_setting
    from tpuops.ops.up import up as run_up

    ctx = Context.from_env(project=project, assume_yes=yes)
    seconds = parse_duration(wait_for_capacity)
    setting = parse_setting(autostop) if autostop is not None else None
    view = ProgressView(enabled=not json_output)
    with ends_cleanly(up_interrupted), view.shown():
        result = run_up(ctx, spec, wait_for_capacity=seconds, progress=view.update, autostop=setting, guard=guard)
    if json_output:
        print_json(result)
        return
    for warning in result.warnings:
        err_console.print(f"warning: {warning}")
    if result.created_nothing:
        console.print(f"{result.cluster}: nothing to do, all {len(result.plan.actions)} resources exist")
    else:
        done = ", ".join(f"{a.verb}d {a.kind} {a.name}" for a in result.done)
        console.print(f"{result.cluster}: {done}")
    for worker in result.workers:
        console.print(
            f"  worker {worker_label(worker)}: internal {worker.internal_ip}, external {worker.external_ip or '-'}, "
            f"ssh {worker.ssh_host}:{worker.ssh_port}"
        )
    print_autostop_install(result.cluster, result.autostop)
    print_guard_started(result.guard)


def print_guard_started(info) -> None:  # noqa: ANN001  (GuardHostInfo | None; import kept lazy)
    if info is not None:
        console.print(f"  guard: {info.kind} {info.name} {info.state} (`tpuops guard status` shows it)", markup=False)


def print_autostop_install(cluster: str, agent) -> None:  # noqa: ANN001  (AgentInstall | None; import kept lazy)
    if agent is None:
        return
    if agent.started:
        console.print(f"  autostop: agent running on {agent.worker} (`tpuops status {cluster}` shows the time left)")
    else:
        err_console.print(f"warning: autostop: the agent did not start ({agent.error}); the TPU will not stop "
                          f"by itself: `tpuops autostop {cluster} 30m` tries again", markup=False)


@app.command()
def status(
    name: str = typer.Argument(None, metavar="NAME", autocompletion=complete_cluster,
                               help="Cluster name; without it, every cluster with local state."),
    zone: list[str] = ZONE_OPTION,
    json_output: bool = JSON_OPTION,
    project: str = PROJECT_OPTION,
) -> None:
    """Resources and their live state, the TPU's state and health, workers and their IPs.

    A cluster without local state is searched for by its label in every zone of the project.

    \b
    Examples:
      tpuops status            # every cluster with local state
      tpuops status my-bert    # one cluster, asked live
    """
    from tpuops.context import Context
    from tpuops.ops import status as ops_status

    ctx = Context.from_env(project=project)
    if name is None:
        clusters = ops_status.list_clusters(ctx)
        if json_output:
            print_json(clusters)
        elif not clusters:
            console.print("no clusters here (create one with `tpuops up SPEC`)")
        else:
            print_cluster_list(clusters)
        return
    result = ops_status.cluster_status(ctx, name, zones=zone)
    if json_output:
        print_json(result)
        return
    console.print(f"{result.name}  {result.provider}  project {result.project or '-'}  zone {result.zone or '-'}")
    if result.found_by_label:
        console.print(f"  no local state: found by its label in {result.found_by_label}")
    print_guard(result.guard)
    if result.pool:
        console.print(f"  pool: {result.pool}", markup=False)
    for move in result.moves:
        console.print(f"  moved {move.at}: {move.message}", markup=False)
    if result.recovery_guard is not None:
        console.print(f"  guard: {result.recovery_guard.summary()}", markup=False)
    for row in result.resources:
        console.print(f"  {row.kind:<16} {row.name:<28} {row.state:<12} {row.detail}")
    if result.tpu_state:
        console.print(f"  TPU: {result.tpu_state}, health {result.tpu_health or '-'}")
    if result.restarts:
        console.print(f"  restarts: {len(result.restarts)} ({restarters(result.restarts)})", markup=False)
        for restart in result.restarts:
            console.print(f"    {restart.at}  {restart.message}")
    for worker in result.workers:
        console.print(f"  worker {worker_label(worker)}: internal {worker.internal_ip}, "
                      f"external {worker.external_ip or '-'}")
    if result.run:
        run = result.run
        when = "now" if run.live else "as last recorded"
        console.print(f"  run {run.id} (started {run.started_at}, restart {run.restart}): {run.command}", markup=False)
        for worker, worker_state in run.workers.items():
            console.print(f"    {worker}: {worker_state} ({when})")
    print_watchdog(result.watchdog)


def restarters(restarts) -> str:  # noqa: ANN001  (a sequence of RestartEvent; import kept lazy)
    """by the guard / by `tpuops watch` / 1 by the guard, 2 by `tpuops watch`."""
    counts: dict[str, int] = {}
    for restart in restarts:
        who = restart.by or "`tpuops watch` or the guard"
        counts[who] = counts.get(who, 0) + 1
    if len(counts) == 1:
        return f"by {next(iter(counts))}"
    return ", ".join(f"{count} by {who}" for who, count in counts.items())


def print_watchdog(view) -> None:  # noqa: ANN001  (WatchdogView | None; import kept lazy)
    """The last step, how long ago the watch saw it, and the hang watchdog's verdict."""
    if view is None:
        return
    import time

    from tpuops.durations import format_duration

    step = "no step yet" if view.last_step is None else f"last step {view.last_step}"
    if view.last_step_at is not None:
        step += f", {format_duration(max(0.0, time.time() - view.last_step_at))} ago"
    written = format_duration(max(0.0, time.time() - view.updated_at))
    console.print(f"  watchdog: {step}; {view.verdict} (as a watch saw it {written} ago)", markup=False)


def print_guard(guard) -> None:  # noqa: ANN001  (GuardStatus | None; import kept lazy)
    if guard is None:
        return
    if guard.cost is not None:
        console.print(f"  {guard.cost.line()}", markup=False)
    if guard.jax_cache_bytes is not None:
        console.print(f"  JAX compilation cache: {size_text(guard.jax_cache_bytes)} in the bucket", markup=False)
    if guard.record_line is not None:
        console.print(f"  TPU {guard.record_line}", markup=False)
    elif guard.autostop is not None:
        console.print(f"  {guard.autostop.line()}", markup=False)
    else:
        console.print(f"  autostop: {guard.setting}", markup=False)


LIST_COLUMNS = ("NAME", "PROVIDER", "ZONE", "WORKERS", "$/HOUR", "HELD", "COST", "AUTOSTOP", "RESOURCES (as recorded)")
RIGHT_ALIGNED = {"WORKERS", "$/HOUR", "HELD", "COST"}


def print_cluster_list(clusters) -> None:  # noqa: ANN001  (list[ClusterSummary]; import kept lazy)
    """One line per cluster under a header, also in a narrow pipe (the resources column is never wrapped); what
    each TPU costs an hour, how long it has been held and what that came to (hours x $/hour), and autostop."""
    rows = [LIST_COLUMNS]
    rows += [(c.name, c.provider, c.zone or "-", str(c.workers), *cost_cells(c.cost), c.autostop,
              ", ".join(c.resources) or "-") for c in clusters]
    last = len(LIST_COLUMNS) - 1
    widths = [max(len(row[i]) for row in rows) for i in range(last)]
    for row in rows:
        cells = [cell.rjust(width) if LIST_COLUMNS[i] in RIGHT_ALIGNED else cell.ljust(width)
                 for i, (cell, width) in enumerate(zip(row[:last], widths, strict=True))]
        console.print("  ".join([*cells, row[last]]), markup=False)
    console.print("`tpuops status NAME` asks the cloud for one cluster's live state. Costs are at list prices "
                  "(TRC quota: free).", markup=False)


def cost_cells(cost) -> tuple[str, str, str]:  # noqa: ANN001  (CostSoFar | None; import kept lazy)
    """$/hour, time held, cost so far: `-` without a TPU held, `free` on the local simulator, `?` for a type with
    no known list price."""
    from tpuops.durations import format_duration

    if cost is None:
        return "-", "-", "-"
    held = format_duration(cost.uptime_seconds)
    if not cost.priced:
        return "?", held, "?"
    if cost.per_hour == 0.0:
        return "free", held, "free"
    return f"${cost.per_hour:.2f}", held, f"${cost.dollars:.2f}"


@app.command()
def down(
    name: str = typer.Argument(..., metavar="NAME|SPEC", autocompletion=complete_cluster,
                               help="Cluster name, or its spec file (to search by label when state is lost)."),
    yes: bool = YES_OPTION,
    zone: list[str] = ZONE_OPTION,
    delete_bucket: bool = typer.Option(False, "--delete-bucket", help="Also delete the bucket."),
    force: bool = typer.Option(False, "--force", help="With --delete-bucket: delete it even if it holds objects."),
    json_output: bool = JSON_OPTION,
    project: str = PROJECT_OPTION,
) -> None:
    """Delete everything tpuops created for a cluster (the bucket only with --delete-bucket).

    Without local state or a spec, every zone of the project is searched by the cluster's label.

    \b
    Examples:
      tpuops down my-bert --yes
      tpuops down my-bert --project my-proj --zone us-central2-b   # state lost: search by label
    """
    from tpuops.context import Context
    from tpuops.ops import down as ops_down

    ctx = Context.from_env(project=project, assume_yes=yes)
    plan, cloud = ops_down.find(ctx, name, delete_bucket=delete_bucket, force=force, zones=zone)
    for item in plan.left_alone:
        err_console.print(f"warning: left alone: {item}")
    if plan.doomed and not yes:
        listing = ", ".join(f"{d.kind} {d.name}" for d in plan.doomed)
        if not sys.stdin.isatty():
            raise UsageError(f"would delete {listing}", "pass --yes to confirm when not on a terminal")
        typer.confirm(f"Delete {listing}?", abort=True)
    view = ProgressView(enabled=not json_output)
    result = ops_down.execute(ctx, plan, cloud, progress=view.update)
    if json_output:
        print_json(result)
        return
    if result.nothing_left:
        console.print(f"{result.cluster}: nothing was left to delete (searched {result.where})")
    else:
        console.print(f"{result.cluster}: deleted " + ", ".join(f"{d.kind} {d.name}" for d in result.deleted))
    for bucket in (d.name for d in result.deleted if d.kind == "bucket"):
        console.print(f"  bucket gs://{bucket} deleted, checked gone", markup=False)
    if result.cost is not None:
        console.print(f"  {cost_in_all(result.cost)}", markup=False)
    if result.kept_bucket:
        console.print(f"  bucket gs://{result.kept_bucket} kept (pass --delete-bucket to delete it)")


def cost_in_all(cost) -> str:  # noqa: ANN001  (CostSoFar; import kept lazy)
    from tpuops.durations import format_duration

    held = f"TPU held {format_duration(cost.uptime_seconds)} ({cost.uptime_seconds / 3600:.2f} h)"
    if cost.per_hour == 0.0 or not cost.priced:
        return f"{held}, {cost.note}"
    return f"{held} x ${cost.per_hour:.2f}/h: about ${cost.dollars:.2f} in all ({cost.note})"


def worker_label(worker: WorkerRecord) -> str:
    """`3`, or with Multislice `2 (s1w0)`: both forms --worker takes."""
    return f"{worker.index} ({worker.name})" if worker.slice_index is not None else str(worker.index)
