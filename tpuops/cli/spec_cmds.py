"""Commands about specs: plan, schema, init."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tpuops.cli.app import JSON_OPTION, PROJECT_OPTION, SPEC_ARGUMENT, app
from tpuops.cli.render import console, print_json

if TYPE_CHECKING:
    from tpuops.guard.vm_plan import GuardPlan

VERB_STYLE = {"create": "[green]+ create  [/]", "keep": "[dim]= keep    [/]", "recreate": "[yellow]~ recreate[/]"}


@app.command()
def plan(
    spec: Path = SPEC_ARGUMENT,
    project: str | None = PROJECT_OPTION,
    live: bool = typer.Option(False, "--live", help="Also ask each zone's TPU API whether it offers the type and "
                              "runtime (needs the account), as `up` does."),
    json_: bool = JSON_OPTION,
) -> None:
    """Validate SPEC and show what `up` would create, the region check and the cost per hour.

    Creates nothing and needs no Google account.

    \b
    Example:
      tpuops plan spec.yaml
    """
    from tpuops.context import Context
    from tpuops.ops.specs import plan_file

    result = plan_file(Context.from_env(project=project), spec, live=live)
    if json_:
        print_json(result)
        return
    where = f"zone {result.zone}, region {result.region}" if result.zone else "local"
    console.print(f"Plan for cluster [bold]{result.cluster}[/] (project {result.project or '(not set)'}, {where})")
    for action in result.actions:
        reason = f"  [dim]({action.reason})[/]" if action.reason else ""
        console.print(f"  {VERB_STYLE[action.verb]} {action.kind:<17} {action.name:<24} {action.summary}{reason}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    if not any("region" in w for w in result.warnings) and result.region:
        console.print(f"Region check: ok (bucket and TPU in {result.region})")
    console.print(f"Estimated cost: [bold]${result.cost_per_hour:.2f}/hour[/] ({result.cost_note})")
    if result.guard is not None:
        render_guard(result.guard)
    if result.autostop != "off":
        console.print(f"Autostop: {result.autostop} (the agent on worker 0 deletes the TPU by itself)")
    else:
        console.print("Autostop: off (`autostop: {idle: 30m}` in the spec, or `tpuops up --autostop 30m`)")


def render_guard(guard: GuardPlan) -> None:
    where = f" in {guard.zone}" if guard.zone else ""
    console.print(f"Guard: {guard.host}{where}, ${guard.price_per_month:.2f}/month ({guard.price_note})")
    if guard.guard_roles:
        console.print(f"  runs as {guard.service_account}, which needs: {'; '.join(guard.guard_roles)}")
        console.print(f"  `guard up` needs: {'; '.join(guard.creator_roles)}")
        console.print(f"  needs of the network: {guard.network}")


@app.command()
def schema() -> None:
    """Print the spec's JSON Schema (for editors).

    \b
    Example:
      tpuops schema > tpuops.schema.json   # then point your editor's YAML schema at it
    """
    from tpuops.ops.specs import spec_schema

    print_json(spec_schema())


@app.command()
def init(
    path: Path = typer.Argument(Path("tpuops.yaml"), metavar="PATH", help="Where to write the spec."),
    template: str = typer.Option("trc-v3-tf", "--template", "-t", metavar="NAME",
                                 help="trc-v3-tf, pytorch-xla, jax-pod, legacy-node or local."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    list_: bool = typer.Option(False, "--list", help="List the templates."),
) -> None:
    """Write a commented spec to start from, and the spec's JSON Schema beside it for your editor.

    \b
    Example:
      tpuops init --template trc-v3-tf spec.yaml
    """
    from tpuops.ops.specs import INIT_TEMPLATES, SCHEMA_FILE, init_spec

    if list_:
        for name, about in INIT_TEMPLATES.items():
            console.print(f"{name:<12} {about}")
        return
    written = init_spec(template, path, force=force)
    console.print(f"Wrote {written} ({INIT_TEMPLATES[template]}) and {written.parent / SCHEMA_FILE} (its JSON "
                  f"Schema, for editors). Next: tpuops plan {written}")
