"""The layers as the code must keep them, read from the source (no module is imported; lazy imports in functions
count, imports only type checkers see do not): every package sits in one of the declared LAYERS and imports only
packages of its own layer or below, no two packages import each other (nor in a longer circle), no import circles
among modules, nothing imports `cli` but `cli`, the Google SDKs only inside `cloud/gcp/`, `ops/` never reaches into
a provider's implementation nor asks which provider it has.

A package is a folder (`cloud/gcp`, `cloud/kinds` and `cloud/local` are folders of their own, so packages of their
own); a top-level module is a package of its own. A new package must be placed in LAYERS on purpose."""

from __future__ import annotations

import ast
import graphlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "tpuops"
# Bottom to top. A package may import the packages of lower layers, and those of its own layer one way only.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("helpers", ("tpuops", "tpuops.errors", "tpuops.atomic", "tpuops.durations", "tpuops.retry", "tpuops.catalog",
                 "tpuops.keys", "tpuops.sizes", "tpuops.spec_yaml", "tpuops.data", "tpuops.data.init")),
    ("shipped programs", ("tpuops.shipped",)),
    ("models", ("tpuops.spec", "tpuops.state", "tpuops.cloud", "tpuops.plan", "tpuops.rules")),
    ("adapters", ("tpuops.cloud.gcp", "tpuops.cloud.local", "tpuops.remote", "tpuops.logs", "tpuops.check",
                  "tpuops.check.line_counter")),
    ("resource kinds", ("tpuops.cloud.kinds",)),
    ("providers", ("tpuops.providers",)),
    ("cluster access", ("tpuops.context", "tpuops.access")),
    ("features", ("tpuops.guard", "tpuops.watchdog", "tpuops.autostop")),
    ("workflows", ("tpuops.ops",)),
    ("readers above the workflows", ("tpuops.dashboard",)),
    ("cli", ("tpuops.cli", "tpuops.__main__")),
)


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(path: Path) -> Iterator[str]:
    """Every module imported, at the top or in a function; not what only type checkers see."""
    def visit(node: ast.AST, type_checking: bool) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            guarded = type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if not guarded and isinstance(child, ast.ImportFrom) and child.module and not child.level:
                yield child.module
                yield from (f"{child.module}.{alias.name}" for alias in child.names)
            elif not guarded and isinstance(child, ast.Import):
                yield from (alias.name for alias in child.names)
            yield from visit(child, guarded)

    yield from visit(ast.parse(path.read_text()), False)


MODULES = modules()
GRAPH = {name: {i for i in imports(path) if i in MODULES and i != name} for name, path in MODULES.items()}
SHIPPED = {name for name in MODULES if name.startswith("tpuops.shipped.")}  # sent as text to workers, the guard VM
LAYER_OF = {package: index for index, (_, packages) in enumerate(LAYERS) for package in packages}


def package_of(module: str) -> str:
    """The folder a module is in (its own name for a package's __init__), or a top-level module itself."""
    path = MODULES[module]
    if path.name == "__init__.py" or path.parent == ROOT:
        return module
    return module.rsplit(".", 1)[0]


def package_arrows() -> dict[tuple[str, str], set[str]]:
    """(importer, imported) package pairs, each with the module imports that make it."""
    arrows: dict[tuple[str, str], set[str]] = {}
    for name, deps in GRAPH.items():
        for dep in deps:
            pair = (package_of(name), package_of(dep))
            if pair[0] != pair[1]:
                arrows.setdefault(pair, set()).add(f"{name} -> {dep}")
    return arrows


def test_every_package_is_placed_in_a_layer() -> None:
    packages = {package_of(name) for name in MODULES}
    assert sorted(packages - set(LAYER_OF)) == [], "place the new package in LAYERS"
    assert sorted(set(LAYER_OF) - packages) == [], "a package in LAYERS that is not there"


def test_no_package_imports_a_higher_layer() -> None:
    upward = [f"{LAYERS[LAYER_OF[a]][0]} imports {LAYERS[LAYER_OF[b]][0]}: {sorted(why)}"
              for (a, b), why in package_arrows().items() if LAYER_OF[b] > LAYER_OF[a]]
    assert upward == []


def test_no_two_packages_import_each_other() -> None:
    arrows = package_arrows()
    pairs = [f"{a} <-> {b}: {sorted(why | arrows[(b, a)])}" for (a, b), why in arrows.items()
             if (b, a) in arrows and a < b]
    assert pairs == []
    graph: dict[str, set[str]] = {}
    for a, b in arrows:
        graph.setdefault(a, set()).add(b)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        pytest.fail(f"package circle: {' imports '.join(reversed(err.args[1]))}")  # each a predecessor of the next


def test_no_import_circles() -> None:
    # A package's __init__ importing its own modules is how a package works, not a circle.
    graph = {name: {d for d in deps if not name.startswith(d + ".")} for name, deps in GRAPH.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        pytest.fail(f"import circle: {' -> '.join(err.args[1])}")


def test_nothing_imports_the_cli_but_the_cli() -> None:
    offenders = [name for name, deps in GRAPH.items() if not name.startswith(("tpuops.cli", "tpuops.__main__"))
                 and any(d.startswith("tpuops.cli") for d in deps)]
    assert offenders == []


def test_google_sdks_only_inside_cloud_gcp() -> None:
    google = re.compile(r"^google\.(cloud|auth|api_core|oauth2)(\.|$)")  # not protobuf: a format, not an SDK
    offenders = [name for name, path in MODULES.items() if not name.startswith("tpuops.cloud.gcp")
                 and any(google.match(i) for i in imports(path))]
    assert offenders == []


def test_ops_never_asks_which_provider_it_has() -> None:
    for name, path in MODULES.items():
        if not name.startswith("tpuops.ops."):
            continue
        deps = GRAPH[name]
        implementations = ("tpuops.cloud.gcp", "tpuops.cloud.local", "tpuops.providers.gcp", "tpuops.providers.local")
        assert not any(d.startswith(implementations) for d in deps), name
        source = path.read_text()
        assert not re.search(r"provider(\.name)?\s*[!=]=\s*['\"]", source), f"{name} tests the provider's name"


def test_the_shipped_agents_import_nothing_of_tpuops() -> None:
    # Parts whose text replaces their import when shipped (shipped.program):
    inlined = ("tpuops.shipped.push_protocol", "tpuops.shipped.push_receive", "tpuops.shipped.push_relay",
               "tpuops.shipped.autostop_agent_host", "tpuops.shipped.metadata_token")
    for name in SHIPPED:
        assert not [i for i in imports(MODULES[name]) if i.startswith("tpuops") and not i.startswith(inlined)], name


def test_nothing_but_the_cli_imports_the_dashboard() -> None:
    """The dashboard sits above the workflows beside the CLI: it reads them, nothing reads it."""
    offenders = [name for name, deps in GRAPH.items() if not name.startswith(("tpuops.cli", "tpuops.dashboard"))
                 and any(d.startswith("tpuops.dashboard") for d in deps)]
    assert offenders == []


def test_the_goodput_fold_imports_nothing_of_the_guard() -> None:
    """The accounting is pure: the ledger carries its tally, so it sits below the ledger (and the workflows)."""
    assert not {d for d in GRAPH["tpuops.guard.goodput"] if d.startswith(("tpuops.guard", "tpuops.ops"))}


MAX_MODULE_LINES = 400  # past this a module does more than one job: split it along its jobs (remote/ssh*.py did)


def test_no_module_is_longer_than_a_few_hundred_lines() -> None:
    long = {name: count for name, path in MODULES.items() if (count := len(path.read_text().splitlines())) >
            MAX_MODULE_LINES}
    assert long == {}, "split these along their jobs"
