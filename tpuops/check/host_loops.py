"""Notes (advice that does not fail `check`): a JAX training loop on the host that reads its jitted step's result
every iteration.

JAX dispatches a jitted call and returns at once; reading a result's value (`.item()`, `float(x)`,
`jax.device_get(x)`, `np.asarray(x)`, printing it) makes the host wait for the device, so it cannot queue the
next step while this one runs. Nothing breaks and no graph is cut: how much it costs depends on how long the
host needs between steps (data loading, logging), which the source does not say. So it is a note, with how to
confirm it, not a finding.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tpuops.check.findings import Finding
from tpuops.check.project import Module, dotted, last_name
from tpuops.check.regions import each_pass
from tpuops.check.wrappers import compiler

READ_CALLS = {"float", "int", "device_get", "asarray", "array", "print"}
HINT = ("read it every N steps (`if step % N == 0`) or keep a running sum on the device; to confirm, compare "
        "steps/s with the read moved under `if step % 100 == 0`")


def host_loop_notes(module: Module) -> Iterator[Finding]:
    if "jax" not in module.imported_roots:
        return
    jitted = _jitted_names(module)
    if not jitted:
        return
    for loop in module.loops:
        results = _step_results(loop, jitted)
        if not results:
            continue
        for node in each_pass(loop.body, _scheduled):  # not what runs every N steps
            read, name = _read_of(node, results)
            if read:
                yield Finding(
                    "XLA003", "host-sync",
                    f"{read} of `{name}` (what `{results[name]}` returned) every iteration of the loop at line "
                    f"{loop.lineno} makes the host wait for the device before it can queue the next step", HINT,
                    module.rel, node.lineno)


def _jitted_names(module: Module) -> set[str]:
    """Names the module calls a jitted function by: decorated defs, and names bound to jax.jit(f)/pmap/pjit."""
    names = {name for name, defs in module.defs.items()
             if any(compiler(d, module) == "jax" for node in defs for d in node.decorator_list)}
    for assign in module.assigns:
        if isinstance(assign.value, ast.Call) and compiler(assign.value, module) == "jax":
            names |= {t.id for t in assign.targets if isinstance(t, ast.Name)}
    return names


def _step_results(loop: ast.For | ast.AsyncFor | ast.While, jitted: set[str]) -> dict[str, str]:
    """Names bound, in the loop's own body, to what a jitted call returns -> the jitted function's name."""
    results: dict[str, str] = {}
    for node in each_pass(loop.body):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                last_name(node.value.func) in jitted and isinstance(node.value.func, ast.Name):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        results[name.id] = node.value.func.id
    return results


def _scheduled(test: ast.AST) -> bool:
    """`step % N == 0`, or a helper asked about the step (`itstime(step, every, total)`): not every iteration."""
    return any((isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)) or
               (isinstance(n, ast.Call) and any(isinstance(a, ast.Name) and "step" in a.id for a in n.args))
               for n in ast.walk(test))


def _read_of(node: ast.AST, results: dict[str, str]) -> tuple[str, str]:
    """('`.item()`', name) / ('`float()`', name) when the node reads a step result's value, else ('', '')."""
    if not isinstance(node, ast.Call):
        return "", ""
    if isinstance(node.func, ast.Attribute) and node.func.attr in {"item", "tolist"} and not node.args:
        name = _root(node.func.value)
        return (f"`.{node.func.attr}()`", name) if name in results else ("", "")
    if last_name(node.func) in READ_CALLS and node.args and \
            dotted(node.func).split(".")[0] in {"float", "int", "print", "jax", "np", "numpy", "onp"}:
        name = _root(node.args[0])
        return (f"`{last_name(node.func)}()`", name) if name in results else ("", "")
    return "", ""


def _root(expr: ast.AST) -> str:
    while isinstance(expr, ast.Subscript | ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else ""
