"""Python values a compiled step sees, told from the source (what `tensors.py` must not take for tensors).

- Flags: a parameter whose default is a constant (`deterministic=True`, `_no_hooks=False`, `axis=0`) is a
  Python setting of the function, not an array JAX traces (a traced argument cannot have a constant default that
  means anything to the trace).
- What `functools.partial(f, a, b)` binds: those parameters get the caller's values, traced only where the caller
  passes a tensor.
- Helpers of the project that return Python values: every `return` gives a constant, a string, a size, a set
  or name comparison, `isinstance(...)` and the like (e.g. "are these axis names in the current mesh?"); a call
  to one is a Python value, whatever its arguments.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator

from tpuops.check.project import (
    FunctionNode,
    Module,
    Project,
    defaults_of,
    dotted,
    last_name,
    params_of,
    positional_params,
)
from tpuops.check.tensors import HOST_COPY_HELPERS, PYTHON_METHODS
from tpuops.check.wrappers import is_false

PYTHON_RESULT_CALLS = {"len", "isinstance", "issubclass", "hasattr", "callable", "set", "frozenset", "str", "repr",
                       "sorted", "tuple", "list", "dict", "range", "type", "id", "float", "int", "bool", "round"}
PYTHON_OF_PYTHON = {"min", "max", "abs", "sum"}  # Python values when given Python values
PYTHON_RESULT_ATTRIBUTES = {"shape", "ndim", "dtype", "size", "axis_names", "name", "rank"}


# Parameters these names hold strings or tree paths (`tree_map_with_path(lambda path, leaf: ...)`), not arrays.
PYTHON_PARAM_NAMES = {"path", "key_path", "keypath", "name", "names", "prefix", "mode", "phase", "split",
                      "optimizer_idx", "batch_idx", "dataloader_idx", "global_step"}  # (Lightning's counters)


def flag_params(function: FunctionNode | ast.Lambda) -> set[str]:
    """Parameters with a constant default, or named for a string or a path: Python settings, not traced
    arrays."""
    return {name for name, default in defaults_of(function).items() if isinstance(default, ast.Constant)} | \
        (params_of(function) & PYTHON_PARAM_NAMES)


SWITCH_PREFIXES = ("use_", "return_", "output_", "do_", "enable_", "disable_", "with_")
SCALAR_ANNOTATIONS = {"int", "float", "bool", "str", "bytes", "None", "Optional", "Union", "Literal",
                      "Path", "PurePath", "PathLike"}  # a file path is never a tensor


def scalar_params(function: FunctionNode | ast.Lambda) -> set[str]:
    """Parameters annotated as Python scalars (`mask_ratio: Optional[float]`, `train: bool`), named for a
    string or a tree path (`def decays(path):`), named as switches are (`use_cache`, `return_dict`,
    `output_attentions`), or for an epoch (`warm_epoch`, a loop's count): never tensors."""
    arguments = function.args
    found = params_of(function) & PYTHON_PARAM_NAMES
    found |= {name for name in params_of(function) if name.startswith(SWITCH_PREFIXES) or "epoch" in name}
    if isinstance(function, ast.Lambda):
        return found
    for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs:
        if argument.annotation is None:
            continue
        names = {n.id for n in ast.walk(argument.annotation) if isinstance(n, ast.Name)} | \
            {n.attr for n in ast.walk(argument.annotation) if isinstance(n, ast.Attribute)} | \
            {str(n.value) for n in ast.walk(argument.annotation) if isinstance(n, ast.Constant)}
        if names and names <= SCALAR_ANNOTATIONS | {"typing"}:
            found.add(argument.arg)
    return found


def none_default_params(function: FunctionNode | ast.Lambda) -> set[str]:
    """Parameters whose default is None (`input_ids=None`): optional inputs as often as settings."""
    return {name for name, default in defaults_of(function).items()
            if isinstance(default, ast.Constant) and default.value is None}


def partial_traced(call: ast.Call, function: FunctionNode, method: bool,
                   is_tensor: Callable[[ast.AST], bool]) -> set[str]:
    """The traced parameters of `function` handed over as `partial(function, *args, **keywords)`: those it
    leaves open (but flags), and those it binds to a tensor."""
    params = positional_params(function, method)
    bound_args = dict(zip(params, call.args[1:], strict=False))
    bound = {**bound_args, **{k.arg: k.value for k in call.keywords if k.arg}}
    every = set(params) | {a.arg for a in function.args.kwonlyargs}
    open_params = every - set(bound) - flag_params(function) - {"self", "cls"}
    return open_params | {name for name, value in bound.items() if name in every and is_tensor(value)}


class DecidedByName:
    """Asked by name (`name in decided`): whether every function of that name in the project passes `test`,
    decided on first ask (most names are never asked)."""

    def __init__(self, project: Project, test: Callable[[Module, FunctionNode], bool]) -> None:
        self._defs, self._test = project.definitions, test
        self._known: dict[str, bool] = {}

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or name not in self._defs:
            return False
        if name not in self._known:
            self._known[name] = False  # a recursive function answers no while it is decided
            self._known[name] = all(self._test(m, d) for m, d in self._defs[name])
        return self._known[name]


def static_fields(project: Project) -> frozenset[str]:
    """Fields the project declares static in its JAX structures (`x: int = struct.field(pytree_node=False)`,
    `eqx.field(static=True)`): JAX passes them as Python values, never traced, whatever holds them."""
    names: set[str] = set()
    for module in project.modules:
        for cls_node in module.classes.values():
            for statement in cls_node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and \
                        _static_field(statement.value):
                    names.add(statement.target.id)
    return frozenset(names)


def _static_field(value: ast.AST | None) -> bool:
    if not isinstance(value, ast.Call) or last_name(value.func) not in {"field", "static_field"}:
        return False
    if last_name(value.func) == "static_field":  # flax.struct.static_field(), equinox's older name
        return True
    return any((k.arg == "pytree_node" and is_false(k.value)) or (k.arg == "static" and _true(k.value))
               for k in value.keywords)


def _true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def python_valued_functions(project: Project) -> DecidedByName:
    """The project's functions whose every return is a Python value."""
    return DecidedByName(project, lambda _, function: returns_python(function))


def returns_python(function: FunctionNode) -> bool:
    returns = [n for n in own_nodes(function) if isinstance(n, ast.Return)]
    if not returns or any(r.value is None for r in returns):
        return False
    local = _bindings(function)
    return all(_python(r.value, local) or _nothing(r.value) for r in returns if r.value is not None)


def _nothing(value: ast.AST) -> bool:
    """`return {}`, `return []`: an empty container handed back as it is (a debugging stand-in for a step)."""
    if isinstance(value, ast.Dict):
        return not value.keys
    return isinstance(value, ast.List | ast.Tuple) and not value.elts


def own_nodes(function: FunctionNode) -> Iterable[ast.AST]:
    """The nodes of the function's body, not of the functions defined inside it."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def _bindings(function: FunctionNode) -> dict[str, list[ast.AST]]:
    """What each name of the function is bound to: `total = 0.0` and `total += loss.item()` both count (a name a
    loop binds is bound to the loop, which is no Python value to go by)."""
    bound: dict[str, list[ast.AST]] = {}
    for node in own_nodes(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and _pairwise(node.targets[0], node.value):
            for target, value in zip(node.targets[0].elts, node.value.elts, strict=True):  # `total, n = 0.0, 0`
                bound.setdefault(target.id, []).append(value)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).append(node.value if node.value is not None else node)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.With | ast.AsyncWith | ast.Assign):
            for target in _targets(node):
                bound.setdefault(target, []).append(node)
    return bound


def _pairwise(target: ast.AST, value: ast.AST) -> bool:
    return isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and \
        len(target.elts) == len(value.elts) and all(isinstance(t, ast.Name) for t in target.elts)


def _targets(node: ast.For | ast.AsyncFor | ast.With | ast.AsyncWith | ast.Assign) -> Iterator[str]:
    """The names a loop, a `with ... as` or an unpacking assignment binds."""
    if isinstance(node, ast.For | ast.AsyncFor):
        roots: list[ast.AST] = [node.target]
    elif isinstance(node, ast.Assign):
        roots = list(node.targets)
    else:
        roots = [item.optional_vars for item in node.items if item.optional_vars is not None]
    for root in roots:
        yield from (n.id for n in ast.walk(root) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))


def _python(expr: ast.AST, local: dict[str, list[ast.AST]], depth: int = 0,  # noqa: C901  one case per kind
            visiting: frozenset[str] = frozenset()) -> bool:
    if depth > 8:
        return False
    if isinstance(expr, ast.Constant | ast.JoinedStr):
        return True
    if isinstance(expr, ast.Name):  # (a name met again while deciding it, `total = total + x`, adds nothing)
        return expr.id in visiting or (expr.id in local and all(
            _python(v, local, depth + 1, visiting | {expr.id}) for v in local[expr.id]))
    if isinstance(expr, ast.BinOp):
        return _python(expr.left, local, depth + 1, visiting) and _python(expr.right, local, depth + 1, visiting)
    if isinstance(expr, ast.Attribute):
        return expr.attr in PYTHON_RESULT_ATTRIBUTES
    if isinstance(expr, ast.Call):  # (`xm.mesh_reduce(...)`, `loss.item()`: copied to the host)
        if isinstance(expr.func, ast.Name) and expr.func.id in PYTHON_OF_PYTHON:
            return bool(expr.args) and all(_python(a, local, depth + 1, visiting) for a in expr.args)
        return (isinstance(expr.func, ast.Name) and expr.func.id in PYTHON_RESULT_CALLS) or \
            last_name(expr.func) in HOST_COPY_HELPERS or dotted(expr.func).startswith("math.") or \
            (isinstance(expr.func, ast.Attribute) and expr.func.attr in PYTHON_METHODS)  # .item(), .size(0)
    if isinstance(expr, ast.IfExp):  # `total / n if n > 0 else 0`
        return _python(expr.body, local, depth + 1, visiting) and _python(expr.orelse, local, depth + 1, visiting)
    if isinstance(expr, ast.Tuple):
        return bool(expr.elts) and all(_python(e, local, depth + 1, visiting) for e in expr.elts)
    if isinstance(expr, ast.Dict):  # `{"G_loss": float(G_loss.item()), ...}` (an empty one may be filled later)
        return bool(expr.values) and all(_python(v, local, depth + 1, visiting) for v in expr.values)
    if isinstance(expr, ast.Compare):
        if all(isinstance(op, ast.Is | ast.IsNot | ast.In | ast.NotIn) for op in expr.ops):
            return True
        return all(_python(e, local, depth + 1, visiting) for e in [expr.left, *expr.comparators])
    if isinstance(expr, ast.BoolOp):
        return all(_python(v, local, depth + 1, visiting) for v in expr.values)
    if isinstance(expr, ast.UnaryOp):
        return _python(expr.operand, local, depth + 1, visiting)
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape"
    return False


def is_partial_of(node: ast.AST, parent: ast.AST | None) -> ast.Call | None:
    """The `partial(...)` call that `node` is the function of, if it is one."""
    if isinstance(parent, ast.Call) and last_name(parent.func) == "partial" and parent.args and \
            parent.args[0] is node:
        return parent
    return None
