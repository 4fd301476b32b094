"""Commands about specs: plan, schema, init."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tpuops.cli.app import JSON_OPTION, PROJECT_OPTION, SPEC_ARGUMENT, app
from tpuops.cli.render import console, print_json

if TYPE_CHECKING:
    from tpuops.plan import Plan
    from tpuops.plan.guard_vm import GuardPlan

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
    if len(result.pools) > 1 or live:
        render_pools(result)
    console.print(f"Estimated cost: [bold]${result.cost_per_hour:.2f}/hour[/] ({result.cost_note})")
    if result.guard is not None:
        render_guard(result.guard)
    if result.autostop != "off":
        console.print(f"Autostop: {result.autostop} (the agent on worker 0 deletes the TPU by itself)")
    else:
        console.print("Autostop: off (`autostop: {idle: 30m}` in the spec, or `tpuops up --autostop 30m`)")


def render_pools(result: Plan) -> None:
    console.print("Pools, in order:")
    for index, pool in enumerate(result.pools, 1):
        price = "?" if pool.price_per_hour is None else f"${pool.price_per_hour:.2f}/h"  # as `tpuops catalog`
        bucket = f"bucket {pool.bucket}" if pool.bucket else "no bucket"
        reservation = f", reservation {pool.reservation}" if pool.reservation else ""
        console.print(f"  {index}. {pool.type:<14} {pool.zone:<16} region {pool.region:<14} {pool.provisioning:<11} "
                      f"{price:<10} {bucket}{reservation}")
        if pool.quota:
            console.print(f"     quota: {pool.quota}")
        if pool.move:
            console.print(f"     moving the run here {pool.move}", markup=False)
    if any(pool.move for pool in result.pools):
        from tpuops.plan.egress import PRICE_SOURCE

        console.print(f"  (inter-region transfer: {PRICE_SOURCE})", markup=False)


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
    from_quota: bool = typer.Option(False, "--from-quota", help="Pools where the project's TPU quota is granted "
                                    "(asks the Cloud Quotas API) instead of a template."),
    local: bool = typer.Option(False, "--local", help="With --from-quota: the local simulator's grant."),
    project: str | None = PROJECT_OPTION,
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
    if from_quota:
        from tpuops.context import Context
        from tpuops.ops.init_quota import init_from_quota

        written, report = init_from_quota(Context.from_env(project=project), path, project, local=local, force=force)
        console.print(f"Wrote {written} (its pools: where the TPU quota of {report.project} is granted, by "
                      f"{report.source}) and {written.parent / SCHEMA_FILE}. Next: tpuops plan {written} --live")
        return
    if local or project:
        raise typer.BadParameter("--local and --project go with --from-quota")
    written = init_spec(template, path, force=force)
    also = ""
    if written.trainer is not None:
        also = f", {written.trainer} (the trainer its command runs)"
    elif written.trainer_kept is not None:
        also = f" ({written.trainer_kept} was there already and is kept as the trainer its command runs)"
    console.print(f"Wrote {written.spec} ({INIT_TEMPLATES[template]}){also} and {written.spec.parent / SCHEMA_FILE} "
                  f"(its JSON Schema, for editors). Next: tpuops plan {written.spec}")
