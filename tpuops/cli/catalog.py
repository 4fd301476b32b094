"""`tpuops catalog`: what a zone offers, by the bundled catalog or (--live) by the zone's TPU API."""

from __future__ import annotations

import typer

from tpuops.cli.app import JSON_OPTION, PROJECT_OPTION, app
from tpuops.cli.render import console, err_console, print_json


@app.command("catalog")
def catalog_command(
    zone: str | None = typer.Option(None, "--zone", "-z", help="The zone to show (default: every zone)."),
    live: bool = typer.Option(False, "--live", help="Ask the zone's TPU API instead of the bundled catalog."),
    project: str | None = PROJECT_OPTION,
    json_: bool = JSON_OPTION,
) -> None:
    """Show the TPU types (hosts, chips, $/hour) and runtimes a zone offers.

    Example: tpuops catalog --zone europe-west4-a --live
    """
    from tpuops.context import Context
    from tpuops.ops.offerings import list_offerings

    result = list_offerings(Context.from_env(project=project), zone, live=live, project=project)
    if json_:
        print_json(result.as_dict())
        return
    console.print(f"{'Zone ' + result.zone if result.zone else 'All zones'}, according to the {result.source}")
    console.print(f"  {'type':<16} {'hosts':>5} {'chips':>6} {'$/h':>9} {'spot $/h':>9}  node  "
                  f"{'' if result.zone else 'zones'}")
    for row in result.types:
        hosts, chips = _or_unknown(row.hosts), _or_unknown(row.chips)
        price = f"{row.price_on_demand:.2f}" if row.price_on_demand is not None else "?"
        spot = f"{row.price_spot:.2f}" if row.price_spot is not None else "?"
        console.print(f"  {row.type:<16} {hosts:>5} {chips:>6} {price:>9} {spot:>9}  {'yes' if row.node else '-':<4}  "
                      f"{', '.join(row.zones)}")
    console.print(f"TPU VM runtimes: {', '.join(result.runtimes) or '(none)'}")
    if result.machines:
        console.print("Compute Engine TPU machine types (tpu.api: compute; list prices as of "
                      f"{result.machines_as_of}):")
        console.print(f"  {'machine type':<20} {'chips':>5} {'$/h':>9} {'spot $/h':>9}  default api")
        for machine in result.machines:
            price = "?" if machine.price_on_demand is None else f"{machine.price_on_demand:.2f}"
            spot = "?" if machine.price_spot is None else f"{machine.price_spot:.2f}"
            console.print(f"  {machine.machine_type:<20} {machine.chips:>5} {price:>9} {spot:>9}  "
                          f"{machine.default_api} ({machine.generation})")
    if result.node_versions:
        console.print(f"Legacy TPU Node versions: {', '.join(result.node_versions)}")
    for warning in result.warnings:
        err_console.print(f"[yellow]warning:[/] {warning}")


def _or_unknown(value: int | None) -> str:
    return "?" if value is None else str(value)
