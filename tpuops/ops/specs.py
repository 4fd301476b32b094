"""Workflows about spec files: plan one (no cloud calls), write a starting one."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tpuops import rules
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.plan import Plan, make_plan
from tpuops.spec import Spec, load_spec

INIT_TEMPLATES = {
    "trc-v3-tf": "TensorFlow on a TPU Research Cloud v3-8 TPU VM",
    "pytorch-xla": "PyTorch/XLA (PJRT) on a v3-8 TPU VM",
    "jax-pod": "JAX on a v4-32 pod slice through a queued resource",
    "legacy-node": "TensorFlow on a legacy TPU Node with its client VM",
    "local": "the local simulator (no Google account needed)",
}


def load_checked(path: str | Path) -> Spec:
    """load_spec plus the checks on local files the spec will push."""
    spec = load_spec(path)
    rules.check_files(spec, Path(path).resolve().parent, source=str(path))
    return spec


def plan_file(ctx: Context, path: str | Path) -> Plan:
    """Validate a spec and say what `up` would do, with nothing observed (creates nothing, no credentials)."""
    spec = load_checked(path)
    return make_plan(spec, project=ctx.project_for(spec))


def init_spec(template: str, destination: Path, force: bool = False) -> Path:
    if template not in INIT_TEMPLATES:
        raise UsageError(f"unknown template '{template}'", f"choose one of: {', '.join(INIT_TEMPLATES)}")
    if destination.is_dir():
        destination = destination / "tpuops.yaml"
    if destination.exists() and not force:
        raise UsageError(f"{destination} already exists", "pass --force to overwrite or give another path")
    if not destination.parent.is_dir():
        raise UsageError(f"cannot write {destination}: the directory {destination.parent} does not exist",
                         f"create it first (mkdir -p {destination.parent}) or give another path")
    text = resources.files("tpuops.data.init").joinpath(f"{template}.yaml").read_text()
    destination.write_text(text)
    return destination
