"""Rules a spec must follow that need the TPU catalog (the shape rules live in spec.py).

Each rule returns Problems with the field they concern, so the error names file, line and field.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tpuops import catalog
from tpuops.errors import SpecError
from tpuops.spec import LineIndex, Spec, region_of

ZONE_RE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")


@dataclass(frozen=True)
class Problem:
    loc: tuple[str | int, ...]
    message: str
    hint: str | None = None


def check(spec: Spec, source: str = "<spec>", lines: LineIndex | None = None) -> None:
    """Raise SpecError for the first problem found (rules run in the order users fix things)."""
    for rule in RULES:
        for problem in rule(spec):
            field = ".".join(str(part) for part in problem.loc)
            line = lines.line_of(problem.loc) if lines else None
            raise SpecError(problem.message, problem.hint, path=source, line=line, field=field)


def check_files(spec: Spec, base_dir: Path, source: str = "<spec>", lines: LineIndex | None = None) -> None:
    """The local paths the spec pushes must exist (relative paths are relative to the spec's directory)."""
    problems: list[Problem] = []
    if not (base_dir / spec.code.path).is_dir():
        problems.append(Problem(("code", "path"), f"code directory {spec.code.path} does not exist",
                                "paths are relative to the spec file's directory"))
    for index, item in enumerate(spec.data):
        if not (base_dir / item.from_).exists():
            problems.append(Problem(("data", index, "from"), f"data source {item.from_} does not exist",
                                    "paths are relative to the spec file's directory"))
    for problem in problems[:1]:
        field = ".".join(str(part) for part in problem.loc)
        raise SpecError(problem.message, problem.hint, path=source,
                        line=lines.line_of(problem.loc) if lines else None, field=field)


def _accelerator(spec: Spec) -> catalog.Accelerator | None:
    return catalog.load().accelerator(spec.tpu.type)


def known_type(spec: Spec) -> Iterator[Problem]:
    cat = catalog.load()
    if cat.accelerator(spec.tpu.type):
        return
    generation = cat.generation_of(spec.tpu.type)
    if generation:
        yield Problem(("tpu", "type"), f"{spec.tpu.type} is not a {generation.name} size",
                      f"valid: {', '.join(generation.types())}")
        return
    close = difflib.get_close_matches(spec.tpu.type, cat.all_types(), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}?" if close else f"generations: {', '.join(cat.generations)}"
    yield Problem(("tpu", "type"), f"unknown accelerator type '{spec.tpu.type}'", hint)


def zone_offers_type(spec: Spec) -> Iterator[Problem]:
    accelerator = _accelerator(spec)
    if spec.provider != "gcp" or accelerator is None or spec.zone is None:
        return
    offering = catalog.load().zones_offering(accelerator)
    for loc, zone in [(("zone",), spec.zone), *((("tpu", "zones", i), z) for i, z in enumerate(spec.tpu.zones))]:
        if not ZONE_RE.match(zone):
            yield Problem(loc, f"'{zone}' is not a zone name", "zones look like europe-west4-a")
        elif zone not in offering:
            yield Problem(loc, f"zone {zone} is not among the zones offering {accelerator.generation.name} TPUs",
                          f"zones that do: {', '.join(offering)}")


def fallback_zones_in_region(spec: Spec) -> Iterator[Problem]:
    if spec.zone is None:
        return
    region = (spec.bucket.location if spec.bucket and spec.bucket.location else region_of(spec.zone)).lower()
    for index, zone in enumerate(spec.tpu.zones):
        if region_of(zone) != region_of(spec.zone):
            yield Problem(("tpu", "zones", index), f"fallback zone {zone} is outside the region {region}",
                          "keep every zone in the bucket's region to avoid cross-region egress")


def legacy_node_rules(spec: Spec) -> Iterator[Problem]:
    accelerator = _accelerator(spec)
    if spec.tpu.mode != "node" or accelerator is None:
        return
    if not accelerator.generation.node_supported:
        yield Problem(("tpu", "mode"), f"legacy TPU Nodes exist only for v2 and v3, not {accelerator.generation.name}",
                      "use mode: vm (a TPU VM)")
    if spec.client_vm is None:
        yield Problem(("tpu", "mode"), "mode: node needs a client_vm to run the trainer",
                      "add client_vm: {machine_type: n1-standard-2}")
    if spec.tpu.queued:
        yield Problem(("tpu", "queued"), "queued resources create TPU VMs only", "use mode: vm or queued: false")
    if spec.trainer and spec.trainer.framework == "jax":
        yield Problem(("trainer", "framework"), "JAX does not run on legacy TPU Nodes", "use mode: vm")
    if spec.trainer and spec.trainer.framework == "tensorflow":
        # The input pipeline of a TPU Node runs on the TPU host, which cannot read the client VM's disk.
        for index, item in enumerate(spec.data):
            if not item.to.startswith("gs://"):
                yield Problem(("data", index, "to"), "a TPU Node reads data from GCS only, not the client VM's disk",
                              "send data to gs://BUCKET/...")
        if spec.logs.tensorboard and not spec.logs.tensorboard.startswith("gs://"):
            yield Problem(("logs", "tensorboard"), "a TPU Node writes TensorBoard logs to GCS only",
                          "use gs://BUCKET/...")


def runtime_fits(spec: Spec) -> Iterator[Problem]:
    accelerator = _accelerator(spec)
    runtime = spec.tpu.runtime
    if accelerator is None or runtime is None or spec.provider != "gcp":
        return
    generation = accelerator.generation
    valid = generation.node_runtimes if spec.tpu.mode == "node" else generation.vm_runtimes
    if runtime not in valid:
        what = "legacy Node version" if spec.tpu.mode == "node" else "TPU VM runtime"
        yield Problem(("tpu", "runtime"), f"'{runtime}' is not a {what} for {generation.name}",
                      f"valid: {', '.join(valid)}")


def scheduling(spec: Spec) -> Iterator[Problem]:
    if spec.tpu.preemptible and spec.tpu.spot:
        yield Problem(("tpu", "spot"), "preemptible and spot are exclusive", "spot is the newer model; keep one")


RULES: list[Callable[[Spec], Iterator[Problem]]] = [
    known_type, zone_offers_type, fallback_zones_in_region, legacy_node_rules, runtime_fits, scheduling,
]
