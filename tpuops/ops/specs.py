"""Workflows about spec files: plan one (no cloud calls, or with --live the zone's TPU API), write a starting one."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tpuops import rules
from tpuops.context import Context
from tpuops.errors import TpuopsError, UsageError
from tpuops.plan import Plan, PoolPlan, make_plan
from tpuops.remote.manifest import scan_tree
from tpuops.spec import Spec, load_spec_with_lines

INIT_TEMPLATES = {
    "trc-v3-tf": "TensorFlow on a TPU Research Cloud v3-8 TPU VM",
    "pytorch-xla": "PyTorch/XLA (PJRT) on a v3-8 TPU VM",
    "jax-pod": "JAX on a v4-32 pod slice through a queued resource",
    "legacy-node": "TensorFlow on a legacy TPU Node with its client VM",
    "local": "the local simulator (no Google account needed)",
}

# `init` writes the schema beside the spec and names it by a relative path, which the YAML language server
# resolves against the spec's own directory: the editor finds it offline, and the line stays true for whoever
# clones the project (an absolute path into one machine's site-packages or TPUOPS_HOME would not).
SCHEMA_FILE = "tpuops.schema.json"
SCHEMA_MODELINE = f"# yaml-language-server: $schema={SCHEMA_FILE}\n"


@dataclass(frozen=True)
class CheckedSpec:
    spec: Spec
    warnings: tuple[str, ...]  # one line each: file:line: field: what the catalog does not know, or a missing path


def check_spec_file(path: str | Path) -> CheckedSpec:
    """Shape, catalog rules and local paths: raise SpecError for the first certain error, keep the warnings."""
    spec, lines = load_spec_with_lines(path)
    source = str(path)
    warnings = rules.check(spec, source=source, lines=lines)
    warnings += rules.check_files(spec, Path(path).resolve().parent, source=source, lines=lines)
    return CheckedSpec(spec, warnings)


def check_local_inputs(path: str | Path) -> Spec:
    """What `run` and `launch` will need from this machine, checked before the first cloud call: the code
    directory and data sources exist, every file `push` would send from the code directory can be read, and
    the ignore files parse. One SpecError/UsageError for the first problem."""
    spec, lines = load_spec_with_lines(path)
    base_dir = Path(path).resolve().parent
    rules.require_local_paths(spec, base_dir, str(path), lines=lines)
    try:
        scan_tree(base_dir / spec.code.path, spec.code.exclude)  # reads what push reads: unreadable files show
    except PermissionError as err:
        raise UsageError(f"cannot read {err.filename}, which push would send: permission denied",
                         "make it readable, or leave it out with code.exclude or a .tpuopsignore line") from None
    for item in spec.data:
        source = base_dir / Path(item.from_).expanduser()
        if not os.access(source, os.R_OK):
            raise UsageError(f"cannot read data source {source}: permission denied", "make it readable")
    return spec


def load_checked(path: str | Path) -> Spec:
    """The spec a command that creates works from: check_spec_file, its warnings left to `plan`."""
    return check_spec_file(path).spec


def plan_file(ctx: Context, path: str | Path, live: bool = False) -> Plan:
    """Validate a spec and say what `up` would do, with nothing observed (creates nothing).

    Without `live` no credentials are needed; with it the zone (and each fallback zone) is asked what it offers,
    as `up` does, and a type or runtime it does not offer is an error."""
    from tpuops.ops.plan_egress import cross_region_reads, with_move_costs

    checked = check_spec_file(path)
    spec = checked.spec
    warnings = checked.warnings
    provider = cloud = None
    if live:
        from tpuops.ops.offerings import verify_spec_zones
        from tpuops.plan.guard_vm import reach_warnings

        provider = ctx.provider_for(spec)
        cloud = provider.cloud()
        warnings += tuple(verify_spec_zones(cloud, spec))
        warnings += tuple(reach_warnings(cloud, spec))
    plan = make_plan(spec, project=ctx.project_for(spec))
    if live:
        plan = dataclasses.replace(plan, pools=quota_of_pools(ctx, spec, plan.pools))
    base_dir = Path(path).resolve().parent
    warnings += tuple(cross_region_reads(spec, base_dir, plan.pools, provider, cloud))
    plan = dataclasses.replace(plan, pools=with_move_costs(spec, base_dir, plan.pools, provider))
    return dataclasses.replace(plan, warnings=warnings + plan.warnings)


def quota_of_pools(ctx: Context, spec: Spec, pools: tuple[PoolPlan, ...]) -> tuple[PoolPlan, ...]:
    """Each pool with whether the project's quota has room for it now (one quota call for all of them). The
    quota only informs `plan`: when it cannot be read, each pool says why instead of the plan failing."""
    from tpuops.ops.quota import quota_of

    provider = ctx.provider_for(spec)
    try:
        report = quota_of(provider.cloud(), provider.project or "local")
    except TpuopsError as err:
        return tuple(dataclasses.replace(pool, quota=f"not checked: {err}") for pool in pools)
    return tuple(dataclasses.replace(pool, quota=str(report.pool_coverage(
        pool.type, pool.zone, pool.provisioning, pool.reservation, spec.tpu.slices))) for pool in pools)


# Templates that come with a trainer, written beside the spec as the file its command runs: a spec must run as
# written (`tpuops init --template local x.yaml && tpuops run x.yaml` in an empty directory).
INIT_TRAINERS = {"local": ("local-train.py", "train.py")}


@dataclass(frozen=True)
class InitResult:
    spec: Path
    trainer: Path | None = None  # the trainer written beside it
    trainer_kept: Path | None = None  # a file of that name was there already: left as it was


def spec_destination(destination: Path, force: bool) -> Path:
    """Where `init` writes (a directory gets tpuops.yaml inside), refused before anything is written or asked."""
    if destination.is_dir():
        destination = destination / "tpuops.yaml"
    if destination.exists() and not force:
        raise UsageError(f"{destination} already exists", "pass --force to overwrite or give another path")
    if not destination.parent.is_dir():
        raise UsageError(f"cannot write {destination}: the directory {destination.parent} does not exist",
                         f"create it first (mkdir -p {destination.parent}) or give another path")
    return destination


def init_spec(template: str, destination: Path, force: bool = False) -> InitResult:
    if template not in INIT_TEMPLATES:
        raise UsageError(f"unknown template '{template}'", f"choose one of: {', '.join(INIT_TEMPLATES)}")
    destination = spec_destination(destination, force)
    files = resources.files("tpuops.data.init")
    destination.write_text(SCHEMA_MODELINE + files.joinpath(f"{template}.yaml").read_text())
    # Rewritten on every init: it is generated, so the newest tpuops' schema replaces an older one.
    (destination.parent / SCHEMA_FILE).write_text(json.dumps(spec_schema(), indent=2) + "\n")
    if template not in INIT_TRAINERS:
        return InitResult(destination)
    shipped, name = INIT_TRAINERS[template]
    trainer = destination.parent / name
    if trainer.exists():  # the user's own trainer (--force is about the spec): never overwritten
        return InitResult(destination, trainer_kept=trainer)
    trainer.write_text(files.joinpath(shipped).read_text())
    return InitResult(destination, trainer=trainer)


def spec_schema() -> dict[str, object]:
    """The spec's JSON Schema, as `tpuops schema` prints it and `init` writes it."""
    return Spec.model_json_schema(by_alias=True)
