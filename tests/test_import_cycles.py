"""No circle among tpuops modules at import time: each module's top-level imports (not those inside functions
or under TYPE_CHECKING) form a graph without cycles, so any module can be imported first."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "tpuops"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path, modules: set[str]) -> set[str]:
    """The tpuops modules a module imports when it is imported (a name imported from a package counts as the
    submodule when there is one)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in modules}


def graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in ROOT.rglob("*.py")}
    return {name: top_level_imports(path, set(paths)) - {name} for name, path in paths.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path of module names, or None (depth-first search with three colours)."""
    colour = {name: 0 for name in edges}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        colour[name] = 1
        stack.append(name)
        for target in sorted(edges[name]):
            if colour[target] == 1:
                return stack[stack.index(target):] + [target]
            if colour[target] == 0 and (cycle := visit(target)):
                return cycle
        stack.pop()
        colour[name] = 2
        return None

    for name in sorted(edges):
        if colour[name] == 0 and (cycle := visit(name)):
            return cycle
    return None


def test_finder_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_graph_knows_the_modules() -> None:
    edges = graph()
    assert "tpuops.cloud.blob_types" in edges["tpuops.cloud.gcp.gcs_blobs"]
    assert "tpuops.cloud.blobs" not in edges["tpuops.cloud.gcp.gcs_blobs"]
    assert "tpuops.spec" in edges["tpuops.rules"] and "tpuops.rules" not in edges["tpuops.spec"]


def test_no_import_cycles() -> None:
    assert find_cycle(graph()) is None
