"""`tpuops quota`: the project's TPU quota, what its TPUs hold of it, and what is free now."""

from __future__ import annotations

import typer

from tpuops.cli.app import JSON_OPTION, PROJECT_OPTION, app
from tpuops.cli.render import console, print_json


@app.command("quota")
def quota_command(
    zone: str | None = typer.Option(None, "--zone", "-z", help="Only this zone's limits and its region's."),
    local: bool = typer.Option(False, "--local", help="The local simulator's simulated grant instead of Google's."),
    project: str | None = PROJECT_OPTION,
    json_: bool = JSON_OPTION,
) -> None:
    """Show the project's TPU quota per zone or region, generation and kind, what is used and what is free.

    A limit above Google's default is marked granted: that is what a TRC grant looks like.

    \b
    Example:
      tpuops quota --project my-trc-project
    """
    from tpuops.context import Context
    from tpuops.ops.quota import project_quota

    report = project_quota(Context.from_env(project=project), project, zone, local=local)
    if json_:
        print_json(report.as_dict())
        return
    console.print(f"TPU quota of project {report.project}{' in ' + report.zone if report.zone else ''} "
                  f"(limits: {report.source}; use: {len(report.holdings)} TPUs and queued resources holding quota, "
                  "listed through the TPU API and Compute Engine)")
    rows = report.rows
    print_health(report.health)
    if not rows:
        console.print("  no TPU quota above zero here (Google's default for every TPU but v2-8 and v3-8 is 0)")
        return
    console.print(f"  {'location':<18} {'generation':<10} {'kind':<10} {'limit':>7} {'default':>7} {'used':>6} "
                  f"{'free':>6}  unit")
    for row in rows:
        limit = row.limit
        what = limit.generation + (" serving" if limit.serving else " pods" if limit.slices == "pod" else "")
        shown_limit = "unlimited" if limit.limit < 0 else str(limit.limit)
        used = "-" if row.used is None else str(row.used)
        free = "-" if row.free is None else str(row.free)
        where = "any other " + limit.scope if limit.location == "*" else limit.location
        console.print(f"  {where:<18} {what:<10} {limit.kind:<10} {shown_limit:>7} {limit.default:>7} {used:>6} "
                      f"{free:>6}  {limit.unit}{'  granted' if limit.granted else ''}")


def print_health(health) -> None:  # noqa: ANN001  (a sequence of PoolHealth; import kept lazy)
    """Pool health from this machine's clusters' history (what `tpu.order: health` sorts by)."""
    if not health:
        return
    console.print("  pool health (this machine's clusters' history, healthiest first):", markup=False)
    for pool in health:
        console.print(f"    {pool.line()}", markup=False)
