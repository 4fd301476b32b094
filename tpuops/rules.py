"""Rules a spec must follow that need the TPU catalog (the shape rules live in spec.py).

The catalog advises; the zone's TPU API decides (`ops/offerings.py`, asked by `up` and `plan --live`). So a
type, runtime or zone the catalog does not list is a warning naming the catalog's date, and only what is
certainly wrong is an error: a type that is no TPU shape at all, a legacy-Node version on a TPU VM or the
reverse, a Node on v4+, a runtime built for another generation.

Each rule yields Problems with the field they concern, so a message names file, line and field.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tpuops import catalog
from tpuops.errors import SpecError
from tpuops.plan import tpu_api_of
from tpuops.spec import LineIndex, Spec, region_of

ZONE_RE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
PATHS_HINT = "paths are relative to the spec file's directory"
PYTHON_RE = re.compile(r"python(\d+(\.\d+)?)?")  # python, python3, python3.11


@dataclass(frozen=True)
class Problem:
    loc: tuple[str | int, ...]
    message: str
    hint: str | None = None
    severity: Literal["error", "warning"] = "error"


def check(spec: Spec, source: str = "<spec>", lines: LineIndex | None = None) -> tuple[str, ...]:
    """Raise SpecError for the first error (rules run in the order users fix things); return the warnings."""
    if spec.tpu.pools:
        problems = [problem for rule in RULES if rule not in POOL_RULES for problem in rule(spec)]
        problems += pool_problems(spec)
    else:
        problems = [problem for rule in RULES for problem in rule(spec)]
    return _raise_first_error_or_warnings(problems, source, lines)


def pool_problems(spec: Spec) -> list[Problem]:
    """The type, zone and runtime rules for each of `tpu.pools`, naming the pool's own fields."""
    found = []
    for index, pool in enumerate(spec.tpu.pools):
        tpu = spec.tpu.model_copy(update={"type": pool.type, "runtime": pool.runtime, "spot": pool.spot,
                                          "preemptible": pool.preemptible, "pools": []})
        view = spec.model_copy(update={"zone": pool.zone, "tpu": tpu})
        here = ("tpu", "pools", index)
        moved = {("tpu", "type"): (*here, "type"), ("zone",): (*here, "zone"), ("tpu", "runtime"): (*here, "runtime")}
        found += [Problem(moved.get(problem.loc, problem.loc), problem.message, problem.hint, problem.severity)
                  for rule in POOL_RULES for problem in rule(view)]
    return found


def check_files(spec: Spec, base_dir: Path, source: str = "<spec>", lines: LineIndex | None = None) -> tuple[str, ...]:
    """The local paths the spec pushes, as warnings: `plan` and `up` do not need them, `push` does; a code path
    that is `/` or the home directory is an error (nobody means to push all of it to every worker)."""
    problems = [*_broad_code_path(spec, base_dir), *missing_local_paths(spec, base_dir, "warning"),
                *_missing_script(spec, base_dir)]
    return _raise_first_error_or_warnings(problems, source, lines)


def require_local_paths(spec: Spec, base_dir: Path, source: str = "<spec>", *, code: bool = True,
                        data: bool = True, lines: LineIndex | None = None) -> None:
    """Before a push sends anything: the local paths it pushes exist (SpecError for the first missing)."""
    for problem in [*(_broad_code_path(spec, base_dir) if code else []),
                    *missing_local_paths(spec, base_dir, "error", code=code, data=data)]:
        raise _spec_error(problem, source, lines)


def _broad_code_path(spec: Spec, base_dir: Path) -> list[Problem]:
    resolved = (base_dir / Path(spec.code.path).expanduser()).resolve()
    if resolved == Path("/"):
        what = "the root directory /"
    elif resolved == Path.home().resolve():
        what = f"your home directory {resolved}"
    else:
        return []
    return [Problem(("code", "path"), f"code.path {spec.code.path} is {what}: every file in it would be pushed to "
                    "every worker", f"point it at the project's own directory; {PATHS_HINT}")]


def missing_local_paths(spec: Spec, base_dir: Path, severity: Literal["error", "warning"], *, code: bool = True,
                        data: bool = True) -> list[Problem]:
    todo = "create it before `tpuops push`" if severity == "warning" else "create it or fix the spec"
    hint = f"{todo}; {PATHS_HINT}"
    problems: list[Problem] = []
    code_dir = base_dir / spec.code.path
    if code and code_dir.exists() and not code_dir.is_dir():
        problems.append(Problem(("code", "path"), f"{spec.code.path} is a file; code.path names the directory "
                                "pushed to every worker", f"give its directory (code: {{path: "
                                f"{Path(spec.code.path).parent.as_posix() or '.'}}}); {PATHS_HINT}", severity))
    elif code and not code_dir.is_dir():
        problems.append(Problem(("code", "path"), f"code directory {spec.code.path} does not exist", hint, severity))
    for index, item in enumerate(spec.data if data else []):
        if not (base_dir / Path(item.from_).expanduser()).exists():
            problems.append(Problem(("data", index, "from"), f"data source {item.from_} does not exist", hint,
                                    severity))
    return problems


def _missing_script(spec: Spec, base_dir: Path) -> list[Problem]:
    """The trainer's script (the first .py argument of python/python3) missing from code.path, where the command
    runs on every worker. A warning: `setup` may make it there (a clone), and a path with $ or ~ is not ours to read."""
    script = command_script(spec.trainer.command) if spec.trainer else None
    code_dir = base_dir / Path(spec.code.path).expanduser()
    if script is None or not code_dir.is_dir() or (code_dir / script).is_file():
        return []
    return [Problem(("trainer", "command"), f"runs {script}, which is not in code.path ({spec.code.path})",
                    "write it there before `tpuops run` or `push`, or fix the command: it runs in the pushed code "
                    "directory on every worker", "warning")]


def command_script(command: str) -> str | None:
    """`python3 -u train.py --lr 1` -> `train.py`; None when no python runs a relative .py file by name."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: the shell will say so on the worker
        return None
    for index, word in enumerate(words):
        if PYTHON_RE.fullmatch(word.rsplit("/", 1)[-1]):
            script = next((w for w in words[index + 1:] if w.endswith(".py")), None)
            if script is None or script.startswith(("/", "~")) or "$" in script:
                return None
            return script
    return None


def describe(problem: Problem, source: str, lines: LineIndex | None) -> str:
    """One line for a warning: file:line: field: message (hint)."""
    return str(_spec_error(problem, source, lines))


def _spec_error(problem: Problem, source: str, lines: LineIndex | None) -> SpecError:
    field = ".".join(str(part) for part in problem.loc)
    line = lines.line_of(problem.loc) if lines else None
    return SpecError(problem.message, problem.hint, path=source, line=line, field=field)


def _raise_first_error_or_warnings(problems: list[Problem], source: str, lines: LineIndex | None) -> tuple[str, ...]:
    for problem in problems:
        if problem.severity == "error":
            raise _spec_error(problem, source, lines)
    return tuple(describe(problem, source, lines) for problem in problems)


def _catalog_note() -> str:
    return f"the catalog (as of {catalog.load().as_of})"


def _shape(spec: Spec) -> catalog.Accelerator | None:
    """Facts for the type, also for a size the catalog does not list but the generation allows."""
    return catalog.load().accelerator(spec.tpu.type, listed_only=False)


def requested_runtime(spec: Spec) -> str | None:
    """The runtime `up` asks for: the spec's, else the catalog's default for the generation and framework."""
    if spec.tpu.runtime:
        return spec.tpu.runtime
    accelerator = _shape(spec)
    framework = spec.trainer.framework if spec.trainer else None
    return catalog.load().default_runtime(accelerator, spec.tpu.mode, framework) if accelerator else None


# ------------------------------------------------------------------------------------------------ rules


def known_type(spec: Spec) -> Iterator[Problem]:
    cat = catalog.load()
    accelerator_type = spec.tpu.type
    if cat.accelerator(accelerator_type):
        return
    alias = cat.alias_for(accelerator_type)
    if alias:
        yield Problem(("tpu", "type"), f"'{accelerator_type}' is not the name Google's API uses",
                      f"did you mean {alias}?")
        return
    generation = cat.generation_of(accelerator_type)
    if generation:
        yield from _unlisted_size(spec, generation)
        return
    close = difflib.get_close_matches(accelerator_type, cat.all_types(), n=3, cutoff=0.5)
    named = re.search(r"v\d+[a-z]*", accelerator_type)  # tpu-v3: a generation named inside is the better guess
    if named and named.group() in cat.generations:
        close = cat.generations[named.group()].types()[:3]
    if not catalog.TYPE_SHAPE_RE.match(accelerator_type):
        hint = f"did you mean {' or '.join(close)}?" if close else f"generations: {', '.join(cat.generations)}"
        yield Problem(("tpu", "type"), f"unknown accelerator type '{accelerator_type}'", hint)
    elif spec.provider == "local":
        yield Problem(("tpu", "type"), f"the local simulator knows only the catalog's types, not '{accelerator_type}'",
                      f"generations: {', '.join(cat.generations)}")
    else:
        hint = f"did you mean {' or '.join(close)}?" if close else None
        yield Problem(("tpu", "type"), f"{accelerator_type} is not in {_catalog_note()}: `up` will ask the zone "
                      "whether it offers it; hosts, chips and price are unknown here", hint, "warning")


def _unlisted_size(spec: Spec, generation: catalog.Generation) -> Iterator[Problem]:
    size = int(spec.tpu.type.rsplit("-", 1)[1])
    listed = ", ".join(generation.types())
    if not generation.size_is_possible(size) or spec.provider == "local":
        yield Problem(("tpu", "type"), f"{spec.tpu.type} is not a {generation.name} size", f"valid: {listed}")
    else:
        yield Problem(("tpu", "type"), f"{_catalog_note()} does not list {spec.tpu.type}: `up` will ask the zone",
                      f"sizes it lists: {listed}", "warning")


def zone_offers_type(spec: Spec) -> Iterator[Problem]:
    if spec.provider != "gcp" or spec.zone is None:
        return
    cat = catalog.load()
    generation = cat.generation_of(spec.tpu.type)
    offering = generation.zones if generation else ()
    for loc, zone in [(("zone",), spec.zone), *((("tpu", "zones", i), z) for i, z in enumerate(spec.tpu.zones))]:
        if not ZONE_RE.match(zone):
            yield Problem(loc, f"'{zone}' is not a zone name", "zones look like europe-west4-a")
        elif zone not in cat.all_zones():
            yield Problem(loc, f"zone {zone} is unknown to {_catalog_note()}: `up` will ask it",
                          f"zones the catalog lists{' for ' + generation.name if generation else ''}: "
                          f"{', '.join(offering or cat.all_zones())}", "warning")
        elif generation and zone not in offering:
            yield Problem(loc, f"{_catalog_note()} does not list {generation.name} TPUs in zone {zone}: "
                          "`up` will ask the zone", f"zones it lists for {generation.name}: {', '.join(offering)}",
                          "warning")


def fallback_zones_in_region(spec: Spec) -> Iterator[Problem]:
    if spec.zone is None:
        return
    region = (spec.bucket.location if spec.bucket and spec.bucket.location else region_of(spec.zone)).lower()
    for index, zone in enumerate(spec.tpu.zones):
        if region_of(zone) != region_of(spec.zone):
            yield Problem(("tpu", "zones", index), f"fallback zone {zone} is outside the region {region}",
                          "keep every zone in the bucket's region to avoid cross-region egress")


def legacy_node_rules(spec: Spec) -> Iterator[Problem]:
    if spec.tpu.mode != "node":
        return
    generation = catalog.load().generation_of(spec.tpu.type)
    if generation is None or not generation.node_supported:
        yield Problem(("tpu", "mode"), f"legacy TPU Nodes exist only for v2 and v3, not {spec.tpu.type}",
                      "use mode: vm (a TPU VM)")
    if spec.client_vm is None:
        yield Problem(("tpu", "mode"), "mode: node needs a client_vm to run the trainer",
                      "add client_vm: {machine_type: n1-standard-2}")
    if spec.tpu.multislice:
        yield Problem(("tpu", "slices"), "Multislice joins TPU VM slices; a legacy TPU Node is one machine",
                      "use mode: vm, or remove slices")
    elif spec.tpu.queued:
        yield Problem(("tpu", "queued"), "queued resources create TPU VMs only", "use mode: vm or queued: false")
    if spec.trainer and spec.trainer.framework == "jax":
        yield Problem(("trainer", "framework"), "JAX does not run on legacy TPU Nodes", "use mode: vm")
    if spec.autostop.enabled:  # the agent runs on the TPU's worker 0, which a legacy Node does not give us
        yield Problem(("autostop",), "autostop runs on a TPU VM's worker 0; a legacy TPU Node has none",
                      "use mode: vm, or remove autostop")
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
    if spec.provider != "gcp" or tpu_api_of(spec) == "compute":  # compute_engine_rules speak of the image instead
        return
    cat = catalog.load()
    generation = cat.generation_of(spec.tpu.type)
    runtime, mode = spec.tpu.runtime, spec.tpu.mode
    if runtime is None:
        if requested_runtime(spec) is None:
            yield Problem(("tpu", "runtime"), f"the catalog has no default runtime for {spec.tpu.type}",
                          "set tpu.runtime (`tpuops catalog --zone ZONE --live` lists what the zone offers)")
        return
    known = generation.runtimes(mode) if generation else ()
    listed = f"{'versions' if mode == 'node' else 'runtimes'} the catalog lists: {', '.join(known)}" if known else None
    if mode == "vm" and catalog.NODE_VERSION_RE.match(runtime):
        yield Problem(("tpu", "runtime"), f"'{runtime}' is a legacy TPU Node version, not a TPU VM runtime",
                      "use a TPU VM runtime such as tpu-ubuntu2204-base, or mode: node")
    elif mode == "node" and catalog.VM_RUNTIME_RE.match(runtime):
        yield Problem(("tpu", "runtime"), f"'{runtime}' is a TPU VM runtime, not a legacy Node version",
                      listed or "use a TensorFlow version such as 2.12.0, or mode: vm")
    elif (built_for := cat.runtime_generation(runtime)) and generation and built_for != generation.name:
        yield Problem(("tpu", "runtime"), f"runtime {runtime} is built for {built_for} TPUs, not {generation.name}",
                      listed)
    elif generation and runtime not in known:  # (a type the catalog does not know was warned about already)
        what = "legacy Node version" if mode == "node" else "TPU VM runtime"
        yield Problem(("tpu", "runtime"), f"{what} {runtime} is not in {_catalog_note()} for {generation.name}: "
                      "`up` will ask the zone whether it offers it", listed, "warning")


def multislice_rules(spec: Spec) -> Iterator[Problem]:
    if not spec.tpu.multislice or spec.tpu.mode == "node":  # (a Node with slices was refused above)
        return
    if spec.provider == "local":
        yield Problem(("tpu", "slices"), "the local simulator runs one slice",
                      "remove slices (or set slices: 1) for provider: local; Multislice needs provider: gcp")
        return
    cat = catalog.load()
    generation = cat.generation_of(spec.tpu.type)
    if generation is not None and not generation.multislice:
        able = ", ".join(g.name for g in cat.generations.values() if g.multislice)
        yield Problem(("tpu", "slices"), f"Multislice is not offered for {generation.name} TPUs",
                      f"generations with Multislice: {able}; or remove slices")


def compute_engine_rules(spec: Spec) -> Iterator[Problem]:
    """tpu.api and what only one of the APIs has: the Cloud TPU API ends before TPU7x; Compute Engine makes
    tpu7x, v6e and v5p, without queued resources, Multislice, legacy Nodes or the preemptible model."""
    cat = catalog.load()
    generation = cat.generation_of(spec.tpu.type)
    served = cat.compute.generations.get(generation.name) if cat.compute and generation else None
    tpu = spec.tpu
    if tpu_api_of(spec) == "tpu":
        if served is not None and not served.tpu_api:
            yield Problem(("tpu", "api"), f"the Cloud TPU API is not supported on TPU7x and later ({tpu.type})",
                          "use tpu.api: compute (the default for tpu7x)")
        for key, value in (("flex_start", tpu.flex_start), ("reservation", tpu.reservation)):
            if value is not None:
                yield Problem(("tpu", key), f"tpu.{key} is a Compute Engine provisioning model",
                              "set tpu.api: compute, or remove it")
        return
    if served is None:
        able = ", ".join(cat.compute.generations) if cat.compute else "none"
        yield Problem(("tpu", "api" if tpu.api else "type"),
                      f"Compute Engine makes TPUs of {able} only, not {generation.name if generation else tpu.type}",
                      "use tpu.api: tpu")
        return
    shape = cat.compute_shape(tpu.type)
    if shape is None:
        yield Problem(("tpu", "type"), f"{tpu.type} has no Compute Engine shape (machine type and topology) in "
                      f"{_catalog_note()}", f"sizes: {', '.join(generation.types()) if generation else '-'}")
    if tpu.mode == "node":
        yield Problem(("tpu", "mode"), "a legacy TPU Node is a Cloud TPU API resource", "use mode: vm")
    if tpu.through_queue:
        yield Problem(("tpu", "slices" if tpu.multislice else "queued"), "queued resources and Multislice belong "
                      "to the Cloud TPU API", "use tpu.flex_start for capacity that waits, or remove it")
    if tpu.preemptible:
        yield Problem(("tpu", "preemptible"), "Compute Engine TPUs have no preemptible model", "use spot: true")
    chosen = [key for key, on in (("spot", tpu.spot), ("flex_start", tpu.flex_start is not None),
                                  ("reservation", tpu.reservation is not None)) if on]
    if len(chosen) > 1:
        yield Problem(("tpu", chosen[1]), f"{' and '.join(chosen)} are exclusive provisioning models", "keep one")
    if tpu.runtime:
        yield Problem(("tpu", "runtime"), "tpu.runtime is a Cloud TPU API runtime: Compute Engine boots the "
                      f"generation's image ({served.image_family})", "remove tpu.runtime", "warning")
    if spec.trainer is not None and spec.trainer.framework == "tensorflow" and shape is not None and shape.multi_host:
        # TPUClusterResolver(tpu=NAME) asks the Cloud TPU API for the workers; "local" (what tpuops sets) is one host.
        yield Problem(("trainer", "framework"), "TensorFlow finds a multi-host slice's workers through the Cloud "
                      "TPU API, which does not know Compute Engine TPUs: each host would train alone",
                      "use JAX or PyTorch/XLA, a single-host type, or tpu.api: tpu where the generation allows it",
                      "warning")


def scheduling(spec: Spec) -> Iterator[Problem]:
    if spec.tpu.preemptible and spec.tpu.spot:
        yield Problem(("tpu", "spot"), "preemptible and spot are exclusive", "spot is the newer model; keep one")


RULES: list[Callable[[Spec], Iterator[Problem]]] = [
    known_type, zone_offers_type, fallback_zones_in_region, compute_engine_rules, legacy_node_rules, multislice_rules,
    runtime_fits, scheduling,
]
POOL_RULES: list[Callable[[Spec], Iterator[Problem]]] = [known_type, zone_offers_type, compute_engine_rules,
                                                        runtime_fits]
