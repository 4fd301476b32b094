"""Which code of a module XLA compiles (the "step"), and which values in it are tensors; read with `ast` only.

A step is: a function under `jax.jit`/`pmap` (decorated, or passed to `jax.jit(f)` / `jax.jit(make_step(...))`),
a `tf.function(jit_compile=...)` or a function handed to `strategy.run`, a function that ends a PyTorch/XLA
step (`xm.mark_step()`, `torch_xla.sync()`, `xm.optimizer_step`), a loop body doing that, and every function
of the module that a step calls by name. Tensor values are what the frameworks' calls return, and what is
computed from those; `.shape`, `.ndim`, `.dtype`, `len()` are Python values even on a tensor.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

FRAMEWORK_MODULES = ("jax", "torch", "torch_xla", "tensorflow", "flax", "optax", "keras")
JIT_CALLS = {"jit", "pmap", "shard_map", "pjit"}
XLA_STEP_ENDS = {"mark_step", "sync", "optimizer_step", "reduce_gradients"}
# Framework calls that return Python values, not tensors.
PYTHON_VALUED = {"device_count", "local_device_count", "process_index", "process_count", "default_backend",
                 "devices", "local_devices", "is_available", "executing_eagerly", "is_tensor", "get_rank",
                 "world_size", "global_ordinal", "xla_device", "get_world_size", "is_grad_enabled"}
PYTHON_ATTRIBUTES = {"shape", "ndim", "dtype", "device", "requires_grad", "is_cuda", "name", "rank"}
PYTHON_METHODS = {"item", "tolist", "numpy", "size", "dim", "numel", "get_shape", "__len__", "element_size"}


@dataclass(frozen=True)
class Step:
    """A compiled region: a function (or a loop body) and the framework that compiles it."""

    node: ast.AST
    name: str
    kind: str  # "jax" | "tf" | "torch"
    static: frozenset[str] | None = None  # a jitted function's static arguments; None: arguments not traced


def dotted(expr: ast.AST) -> str:
    """`jax.numpy.where` -> "jax.numpy.where"; "" for anything but names and attributes."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = dotted(expr.value)
        return f"{base}.{expr.attr}" if base else ""
    return ""


def last_name(expr: ast.AST) -> str:
    return dotted(expr).rsplit(".", 1)[-1]


def framework_aliases(tree: ast.Module) -> set[str]:
    """Local names bound to framework modules: jnp, tf, torch, F, lax, xm, ..."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FRAMEWORK_MODULES:
                    aliases.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FRAMEWORK_MODULES:
            aliases.update(alias.asname or alias.name for alias in node.names)
    return aliases


@dataclass
class ModuleScopes:
    tree: ast.Module
    aliases: set[str] = field(default_factory=set)
    defs: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = field(default_factory=dict)

    @classmethod
    def of(cls, tree: ast.Module) -> ModuleScopes:
        scopes = cls(tree, framework_aliases(tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                scopes.defs.setdefault(node.name, []).append(node)
        return scopes

    # ---------------------------------------------------------------------------------------- steps

    def steps(self) -> list[Step]:
        roots = list(self._roots())
        seen: dict[int, Step] = {}
        queue = roots
        while queue:
            step = queue.pop()
            if id(step.node) in seen:
                continue
            seen[id(step.node)] = step
            for name in _names_used(step.node):
                queue.extend(Step(d, d.name, step.kind) for d in self.defs.get(name, ()) if id(d) not in seen)
        return list(seen.values())

    def _roots(self) -> Iterator[Step]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    kind = _compiling(decorator)
                    if kind:
                        yield Step(node, node.name, kind, _static_arguments(decorator, node))
                if _ends_xla_step(node.body):
                    yield Step(node, node.name, "torch")
            elif isinstance(node, ast.For | ast.While) and _ends_xla_step(node.body, direct=True):
                yield Step(node, f"loop at line {node.lineno}", "torch")
            elif isinstance(node, ast.Call):
                yield from self._compiled_arguments(node)

    def _compiled_arguments(self, call: ast.Call) -> Iterator[Step]:
        """jax.jit(f), jax.jit(make_step(...)), tf.function(f, jit_compile=...), strategy.run(f, ...)."""
        kind = _compiling(call) if last_name(call.func) in JIT_CALLS | {"function"} else None
        if kind is None and last_name(call.func) == "run" and "strategy" in dotted(call.func).lower():
            kind = "tf"
        if kind is None or not call.args:
            return
        target = call.args[0]
        if isinstance(target, ast.Name):
            yield from (Step(d, d.name, kind, _static_arguments(call, d)) for d in self.defs.get(target.id, ()))
        elif isinstance(target, ast.Call) and isinstance(target.func, ast.Name):
            for factory in self.defs.get(target.func.id, ()):
                for returned in _returned_names(factory):
                    yield from (Step(d, d.name, kind, _static_arguments(call, d)) for d in self.defs.get(returned, ()))


def _static_arguments(wrapper: ast.AST, function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str] | None:
    """Under jax.jit every argument is traced but those named by static_argnums/static_argnames."""
    if _compiling(wrapper) != "jax":
        return None
    params = [a.arg for a in function.args.posonlyargs + function.args.args]
    static: set[str] = {"self", "cls"}
    for call in (n for n in ast.walk(wrapper) if isinstance(n, ast.Call)):
        for keyword in call.keywords:
            values = keyword.value.elts if isinstance(keyword.value, ast.Tuple | ast.List) else [keyword.value]
            for value in (v.value for v in values if isinstance(v, ast.Constant)):
                if keyword.arg == "static_argnames" and isinstance(value, str):
                    static.add(value)
                elif keyword.arg == "static_argnums" and isinstance(value, int) and value < len(params):
                    static.add(params[value])
    return frozenset(static)


def _compiling(expr: ast.AST) -> str | None:
    """The framework a decorator / wrapper call compiles with, or None."""
    call = expr if isinstance(expr, ast.Call) else None
    name = last_name(call.func if call else expr)
    if name == "partial" and call and call.args:
        return _compiling(call.args[0])
    if name in JIT_CALLS:
        return "jax"
    if name == "function" and call is not None:
        jit = next((k.value for k in call.keywords if k.arg == "jit_compile"), None)
        if jit is not None and not (isinstance(jit, ast.Constant) and jit.value in (False, None)):
            return "tf"
    return None


def _ends_xla_step(body: list[ast.stmt], direct: bool = False) -> bool:
    """The statements call mark_step()/sync()/optimizer_step (not counting nested functions if `direct`)."""
    for stmt in body:
        for node in _walk_no_defs(stmt) if direct else ast.walk(stmt):
            if isinstance(node, ast.Call) and last_name(node.func) in XLA_STEP_ENDS:
                base = dotted(node.func).split(".")[0]
                if base in {"xm", "torch_xla", "xla_model"} or "xla" in base:
                    return True
    return False


def _walk_no_defs(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            yield from _walk_no_defs(child)


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _returned_names(factory: ast.AST) -> set[str]:
    return {n.value.id for n in ast.walk(factory) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)}


# ---------------------------------------------------------------------------------------------- tensors


class TensorValues:
    """Decides whether an expression in a step is a tensor (as opposed to a Python value)."""

    def __init__(self, step: Step, aliases: set[str]) -> None:
        self.aliases = aliases
        self.names: set[str] = set()
        self.bool_names: set[str] = set()
        if step.static is not None and isinstance(step.node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = step.node.args
            self.names = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs} - step.static
        assigns = [n for n in ast.walk(step.node) if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign)]
        for _ in range(2):  # twice: names computed from names assigned later in a loop body
            for node in assigns:
                if node.value is not None and self.is_tensor(node.value):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                    self.names |= names
                    if self.is_bool(node.value):
                        self.bool_names |= names

    def framework_call(self, call: ast.Call) -> bool:
        path = dotted(call.func)
        return bool(path) and path.split(".")[0] in self.aliases and path.rsplit(".", 1)[-1] not in PYTHON_VALUED

    def is_tensor(self, expr: ast.AST | None) -> bool:  # noqa: C901  one case per expression kind
        if expr is None:
            return False
        if isinstance(expr, ast.Name):
            return expr.id in self.names
        if isinstance(expr, ast.Attribute):
            return expr.attr not in PYTHON_ATTRIBUTES and self.is_tensor(expr.value)
        if isinstance(expr, ast.Subscript):
            return self.is_tensor(expr.value)
        if isinstance(expr, ast.Call):
            if self.framework_call(expr):
                return True
            if isinstance(expr.func, ast.Attribute):  # method on a tensor: x.sum(), x.any()
                return expr.func.attr not in PYTHON_METHODS and self.is_tensor(expr.func.value)
            return False
        if isinstance(expr, ast.Compare):
            if all(isinstance(op, ast.Is | ast.IsNot | ast.In | ast.NotIn) for op in expr.ops):
                return False
            return any(self.is_tensor(e) for e in [expr.left, *expr.comparators])
        if isinstance(expr, ast.BinOp):
            return self.is_tensor(expr.left) or self.is_tensor(expr.right)
        if isinstance(expr, ast.UnaryOp):
            return self.is_tensor(expr.operand)
        if isinstance(expr, ast.BoolOp):
            return any(self.is_tensor(v) for v in expr.values)
        return False

    def is_bool(self, expr: ast.AST) -> bool:
        """A boolean tensor: a comparison of tensors, logical_*/isnan/..., x.bool(), or a name holding one."""
        if isinstance(expr, ast.Name):
            return expr.id in self.bool_names
        if isinstance(expr, ast.Compare):
            return self.is_tensor(expr)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert):
            return self.is_bool(expr.operand)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitAnd | ast.BitOr | ast.BitXor):
            return self.is_bool(expr.left) or self.is_bool(expr.right)
        if isinstance(expr, ast.Call):
            name = last_name(expr.func)
            return (name.startswith("logical_") or name in {"isnan", "isinf", "isfinite", "bool"}) and \
                self.is_tensor(expr)
        return False
