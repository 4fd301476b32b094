"""The layers as the code must keep them, read from the source (no module is imported): no import circles
among tpuops modules (lazy imports in functions count), nothing imports `cli` but `cli`, the Google SDKs only
inside `cloud/gcp/`, `ops/` never reaches into a provider's implementation nor asks which provider it has."""

from __future__ import annotations

import ast
import graphlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "tpuops"
SHIPPED = {"tpuops.shipped.autostop_agent", "tpuops.shipped.autostop_agent_host", "tpuops.shipped.push_agent",
           "tpuops.shipped.push_relay", "tpuops.shipped.push_protocol", "tpuops.shipped.push_receive",
           "tpuops.shipped.guard_fetch_bundle"}  # sent to workers (and to the guard VM) as text


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
        assert not any(d.startswith(("tpuops.cloud.gcp", "tpuops.cloud.local")) for d in deps), name
        source = path.read_text()
        assert not re.search(r"provider(\.name)?\s*[!=]=\s*['\"]", source), f"{name} tests the provider's name"


def test_the_shipped_agents_import_nothing_of_tpuops() -> None:
    # Parts whose text replaces their import when shipped (shipped.program):
    inlined = ("tpuops.shipped.push_protocol", "tpuops.shipped.push_receive", "tpuops.shipped.push_relay",
               "tpuops.shipped.autostop_agent_host")
    for name in SHIPPED:
        assert not [i for i in imports(MODULES[name]) if i.startswith("tpuops") and not i.startswith(inlined)], name
