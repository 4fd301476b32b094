"""The trainer's code directory as the lint sees it: every module parsed once, with what it defines and imports,
so that a step jitted in one module and defined in another is still found. `ast` only: nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
FRAMEWORK_MODULES = ("jax", "torch", "torch_xla", "tensorflow", "flax", "optax", "keras", "haliax", "equinox",
                     "accelerate", "tf_keras")
# What a module imports to train on PyTorch/XLA: Accelerate runs on it on a TPU without the script importing it.
TORCH_XLA_ROOTS = frozenset({"torch_xla", "accelerate"})
LIGHTNING_ROOTS = frozenset({"pytorch_lightning", "lightning"})
KERAS_ROOTS = frozenset({"tensorflow", "keras", "tf_keras"})  # Keras 2 (in TensorFlow), Keras 3, or tf_keras


def dotted(expr: ast.AST) -> str:
    """`jax.numpy.where` -> "jax.numpy.where"; "" for anything but names and attributes."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = dotted(expr.value)
        return f"{base}.{expr.attr}" if base else ""
    return ""


def last_name(expr: ast.AST) -> str:
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return expr.id if isinstance(expr, ast.Name) else ""


def positional_params(function: FunctionNode | ast.Lambda, method: bool = False) -> list[str]:
    """The parameters a call's positional arguments fill, in order; for a call through an object or class
    (`method`: `obj.f(x)`), not the `self` or `cls` it fills itself."""
    params = [a.arg for a in function.args.posonlyargs + function.args.args]
    return params[1:] if method and params and params[0] in {"self", "cls"} else params


def params_of(function: FunctionNode | ast.Lambda) -> set[str]:
    """Every parameter a call can name (not `*args` or `**kwargs`)."""
    return set(positional_params(function)) | {a.arg for a in function.args.kwonlyargs}


def defaults_of(function: FunctionNode | ast.Lambda) -> dict[str, ast.expr]:
    """Each parameter that has a default, with it. Python keeps the defaults apart from the names: the last
    positional parameters take `defaults` in order, the keyword-only ones `kw_defaults` (None: no default)."""
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults):]], arguments.defaults,
                        strict=False))
    defaults |= {a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=False) if d is not None}
    return defaults


MOVES = {"to", "cuda", "train", "eval", "float", "bfloat16"}  # calls that return the object moved


@dataclass
class Module:
    rel: str  # path relative to the code directory, e.g. lib/steps.py
    tree: ast.Module
    source: str
    defs: dict[str, list[FunctionNode]] = field(default_factory=dict)  # every def, nested ones included
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local name -> (module, attribute)
    aliases: set[str] = field(default_factory=set)  # local names bound to framework modules: jnp, xm, tf, nnx, ...
    stars: list[str] = field(default_factory=list)  # modules imported with `from M import *`
    parents: dict[int, ast.AST] = field(default_factory=dict)  # id(node) -> its parent
    lines: list[str] = field(default_factory=list)
    # Collected in the one pass over the tree, so that the rules need not walk it again:
    calls: list[ast.Call] = field(default_factory=list)
    loops: list[ast.For | ast.AsyncFor | ast.While] = field(default_factory=list)
    assigns: list[ast.Assign] = field(default_factory=list)
    context: dict[int, tuple[ast.AST, ast.AST | None]] = field(default_factory=dict)  # call/loop -> (owner, loop)
    bindings: dict[int, list[tuple[list[ast.AST], ast.AST]]] = field(default_factory=dict)  # owner -> bindings
    _assigned: dict[tuple[int, str], list[ast.Assign]] | None = None

    def assigns_to(self, name: str, scope: FunctionNode | None) -> list[ast.Assign]:
        """The assignments `name = ...` (a plain name among the targets) directly in `scope` (a def, or None for
        the module's own code), in source order: an index, so that the rules asking "what was NAME bound to
        here" do not scan every assignment of the module each time."""
        if self._assigned is None:
            self._assigned = {}
            for node in self.assigns:
                owner = id(self.enclosing_function(node))
                for target in {t.id for t in node.targets if isinstance(t, ast.Name)}:
                    self._assigned.setdefault((owner, target), []).append(node)
            for found in self._assigned.values():  # (the one pass of `of` walks with a stack, not in source order)
                found.sort(key=lambda a: (a.lineno, a.col_offset))
        return self._assigned.get((id(scope), name), [])

    def bound_above(self, name: ast.Name) -> ast.Assign | None:
        """The last assignment to `name` above it in its function, in a block that holds it (not in the other
        branch of an `if`): what the name holds where it is read, as far as straight-line code tells."""
        above = [a for a in self.assigns_to(name.id, self.enclosing_function(name))
                 if a.lineno < name.lineno and self._holds(a, name)]
        return above[-1] if above else None

    def _holds(self, statement: ast.stmt, node: ast.AST) -> bool:
        parent = self.parent(statement)
        child = next((n for n in (node, *self.ancestors(node)) if self.parent(n) is parent), None)
        blocks = [getattr(parent, field, None) for field in ("body", "orelse", "finalbody", "handlers")]
        return child is not None and any(isinstance(b, list) and statement in b and child in b for b in blocks)

    @classmethod
    def of(cls, rel: str, tree: ast.Module, source: str) -> Module:
        """One pass over the tree (after parsing, the lint's main cost on a large code directory). For each call
        and loop it records its owner (the innermost def, lambda, class or the module) and the innermost loop
        around it inside that owner; for each owner its bindings (assignments, `for` and comprehension targets,
        `with ... as`), which the tensor inference follows."""
        module = cls(rel, tree, source, lines=source.splitlines())
        parents, context = module.parents, module.context
        stack: list[tuple[ast.AST, ast.AST, ast.AST | None]] = [(tree, tree, None)]
        while stack:
            node, owner, loop = stack.pop()
            kind = type(node)
            child_owner, child_loop = owner, loop
            if kind is ast.Call:
                module.calls.append(node)  # type: ignore[arg-type]
                context[id(node)] = (owner, loop)
            elif kind is ast.For or kind is ast.While or kind is ast.AsyncFor:
                module.loops.append(node)  # type: ignore[arg-type]
                context[id(node)] = (owner, loop)
                child_loop = node
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef or kind is ast.Lambda:
                if kind is not ast.Lambda:
                    module.defs.setdefault(node.name, []).append(node)  # type: ignore[attr-defined]
                child_owner, child_loop = node, None
            elif kind is ast.ClassDef:
                module.classes.setdefault(node.name, node)  # type: ignore[attr-defined, arg-type]
                child_owner, child_loop = node, None
            elif kind is ast.Import or kind is ast.ImportFrom:
                module._import(node)  # type: ignore[arg-type]
            binding = _binding(node) if kind in BINDING_KINDS else None
            if binding is not None:
                module.bindings.setdefault(id(owner), []).append(binding)
                if kind is ast.Assign:
                    module.assigns.append(node)  # type: ignore[arg-type]
            for name in node._fields:  # ast.iter_child_nodes, inlined: half the time
                value = getattr(node, name, None)
                if isinstance(value, list):
                    for item in value:
                        if isinstance(item, ast.AST):
                            parents[id(item)] = node
                            stack.append((item, child_owner, child_loop))
                elif isinstance(value, ast.AST):
                    parents[id(value)] = node
                    stack.append((value, child_owner, child_loop))
        for defs in module.defs.values():
            defs.sort(key=lambda d: d.lineno)
        return module

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The function a call or loop runs in (the module for top-level code)."""
        owner = self.context[id(node)][0]
        return owner if isinstance(owner, FunctionNode) else self.tree

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                self.imported[local] = (alias.name if alias.asname else local, None)
                if alias.name.split(".")[0] in FRAMEWORK_MODULES:
                    self.aliases.add(local)
            return
        base = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name == "*":
                self.stars.append(base)  # `from utils.metric import *`: its names, looked up when asked
                continue
            self.imported[alias.asname or alias.name] = (base, alias.name)
            if node.module and node.module.split(".")[0] in FRAMEWORK_MODULES:
                self.aliases.add(alias.asname or alias.name)

    @cached_property
    def imported_roots(self) -> frozenset[str]:
        """The top-level packages it imports from (`torch_xla` for `import torch_xla.core.xla_model as xm`): which
        frameworks the file uses, which several rules ask."""
        return frozenset(source.split(".")[0] for source, _ in self.imported.values())

    def imports_any(self, roots: Collection[str]) -> bool:
        return not self.imported_roots.isdisjoint(roots)

    @property
    def name(self) -> str:
        parts = self.rel.removesuffix(".py").split("/")
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def resolved(self, relative: str) -> str:
        """A relative import's dotted name: `..models.vit` from pkg/sub/train.py (or pkg/sub/__init__.py, which is
        the package itself) -> "pkg.models.vit"."""
        level = len(relative) - len(relative.lstrip("."))
        parts = self.name.split(".") if self.name else []
        package = parts if self.rel.endswith("__init__.py") else parts[:-1]
        base, rest = package[:max(len(package) - level + 1, 0)], relative[level:]
        return ".".join([*base, rest] if rest else base)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def enclosing_function(self, node: ast.AST) -> FunctionNode | None:
        return next((a for a in self.ancestors(node) if isinstance(a, FunctionNode)), None)

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, ast.ClassDef)), None)

    def line(self, number: int) -> str:
        return self.lines[number - 1] if 0 < number <= len(self.lines) else ""


BINDING_KINDS = {ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension,
                 ast.withitem}


def _binding(node: ast.AST) -> tuple[list[ast.AST], ast.AST] | None:
    """(targets, value) when the node binds names."""
    if isinstance(node, ast.Assign):
        return list(node.targets), node.value
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None:
        return [node.target], node.value
    if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        return [node.target], node.iter
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [node.optional_vars], node.context_expr
    return None


@dataclass
class Project:
    modules: list[Module]
    by_name: dict[str, Module] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for module in self.modules:
            self.by_name[module.name] = module
        for module in self.modules:  # a last resort: `from steps import x` where steps.py is somewhere else
            self.by_name.setdefault(module.name.rsplit(".", 1)[-1], module)

    @cached_property
    def definitions(self) -> dict[str, list[tuple[Module, FunctionNode]]]:
        """Every def of the project by name, module by module: what the questions asked of a function by its name
        alone (does it return a Python value, a tensor) look through."""
        found: dict[str, list[tuple[Module, FunctionNode]]] = {}
        for module in self.modules:
            for name, defs in module.defs.items():
                found.setdefault(name, []).extend((module, d) for d in defs)
        return found

    @cached_property
    def calls_by_name(self) -> dict[str, list[tuple[Module, ast.Call]]]:
        """Every call of the project, by the last name of what it calls (`f` of `self.f(...)`), module by module."""
        found: dict[str, list[tuple[Module, ast.Call]]] = {}
        for module in self.modules:
            for call in module.calls:
                found.setdefault(last_name(call.func), []).append((module, call))
        return found

    def callers(self, function: FunctionNode) -> list[tuple[Module, ast.Call]]:
        """The project's calls that name `function` (as `functions` resolves their callee)."""
        return [(module, call) for module, call in self.calls_by_name.get(function.name, [])
                if any(callee is function for _, callee in self.functions(call.func, module))]

    @cached_property
    def roots(self) -> set[str]:
        """The first parts of the names an import of one of the project's modules starts with ("" for a relative
        import)."""
        return {name.split(".")[0] for name in self.by_name} | {""}

    def module_named(self, name: str, importer: Module) -> Module | None:
        """The module an import names, looked up as Python would find it from the importer: next to it (a script's
        own directory is on sys.path), then from each directory above, then anywhere by its last part."""
        if name.startswith("."):
            return self.by_name.get(importer.resolved(name))
        prefix = importer.name.rsplit(".", 1)[0] if "." in importer.name else ""
        while True:
            found = self.by_name.get(f"{prefix}.{name}" if prefix else name)
            if found is not None or not prefix:
                return found or self.by_name.get(name.rsplit(".", 1)[-1])
            prefix = prefix.rsplit(".", 1)[0] if "." in prefix else ""

    def functions(self, expr: ast.AST, module: Module) -> list[tuple[Module, FunctionNode]]:
        """The project's defs an expression names: `f`, `self.f`, `mod.f`, or `f` imported from a module of ours."""
        if isinstance(expr, ast.Name):
            local = module.defs.get(expr.id)
            if local:
                return [(module, d) for d in local]
            source, attribute = module.imported.get(expr.id, ("", None))
            target = self.module_named(source, module) if attribute else None
            if target is not None:
                return [(target, d) for d in target.defs.get(attribute or "", ())]
            for star in module.stars:  # `from utils import *` ... `helper(x)`
                target = self.module_named(star, module)
                if target is not None and expr.id in target.defs:
                    return [(target, d) for d in target.defs[expr.id]]
            return self._made_by_a_factory(expr, module)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            owner = expr.value.id
            if owner in {"self", "cls"}:
                own = [(module, d) for d in module.defs.get(expr.attr, ())]
                return own or self._inherited(expr, expr.attr, module)
            source, attribute = module.imported.get(owner, ("", None))
            name = (source + attribute if source.endswith(".") else f"{source}.{attribute}") if attribute else source
            target = self.module_named(name, module) if source else None
            if target is not None:
                return [(target, d) for d in target.defs.get(expr.attr, ())]
            return self._methods(expr.value, expr.attr, module)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Attribute) and \
                isinstance(expr.value.value, ast.Name) and expr.value.value.id == "self":
            return self._attribute_methods(expr.value.attr, expr.attr, expr, module)
        return []

    def _made_by_a_factory(self, name: ast.Name, module: Module) -> list[tuple[Module, FunctionNode]]:
        """`train = train_fns.GAN_training_function(G, D, config)` ... `train(x, y)`: the function the factory
        returns, defined inside it."""
        found: list[tuple[Module, FunctionNode]] = []
        for targets, value in module.bindings.get(id(module.enclosing_function(name) or module.tree), []):
            if not isinstance(value, ast.Call) or [dotted(t) for t in targets] != [name.id] or \
                    dotted(value.func) == name.id:
                continue
            for factory_module, factory in self.functions(value.func, module):
                inner = {d.name: d for d in ast.walk(factory) if isinstance(d, FunctionNode) and d is not factory}
                found += [(factory_module, inner[r.value.id]) for r in ast.walk(factory)
                          if isinstance(r, ast.Return) and isinstance(r.value, ast.Name) and r.value.id in inner]
        return found

    def _attribute_methods(self, attribute: str, method: str, expr: ast.AST,
                           module: Module) -> list[tuple[Module, FunctionNode]]:
        """`self.metric.update` where the class sets `self.metric = IoUMetric(...)` (a class of ours): that
        class's method."""
        cls_node = module.enclosing_class(expr)
        kept = (node for node in (ast.walk(cls_node) if cls_node is not None else ())
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == attribute and
                                                        isinstance(t.value, ast.Name) and t.value.id == "self"
                                                        for t in node.targets))
        return self._first_class_methods(kept, method, module)

    def _methods(self, owner_node: ast.Name, method: str, module: Module) -> list[tuple[Module, FunctionNode]]:
        """`meter.update` where `meter = RocAucMeter()` (or `model = Net(cfg).to(device)`) builds a class of
        ours: that class's method."""
        return self._first_class_methods(module.assigns_to(owner_node.id, module.enclosing_function(owner_node)),
                                         method, module)

    def _first_class_methods(self, assigns: Iterable[ast.Assign], method: str,
                             module: Module) -> list[tuple[Module, FunctionNode]]:
        """The `method` of the first class of ours that one of the assignments builds (`x = Net(cfg)`)."""
        built = (node.value for node in assigns if isinstance(node.value, ast.Call))
        return next((found for call in built if (found := self._class_methods(call, method, module))), [])

    def _class_methods(self, built: ast.Call, method: str, module: Module) -> list[tuple[Module, FunctionNode]]:
        """The `method` of the class of ours that `built` instantiates (`Net(cfg).to(device)` included)."""
        while isinstance(built.func, ast.Attribute) and built.func.attr in MOVES and \
                isinstance(built.func.value, ast.Call):
            built = built.func.value  # Net(...).to(device), Net(...).cuda().train()
        found = self.class_named(last_name(built.func), module)
        if found is None:
            return []
        home, cls_node = found
        return [(home, d) for d in cls_node.body if isinstance(d, FunctionNode) and d.name == method]

    def class_named(self, cls_name: str, module: Module) -> tuple[Module, ast.ClassDef] | None:
        """The class of ours that `cls_name` names in `module`: its own, imported from a module of ours, or
        star-imported."""
        home: Module | None = module if cls_name in module.classes else None
        if home is None and cls_name in module.imported:
            source, attribute = module.imported[cls_name]
            home = self.module_named(source, module) if attribute else None
        if home is None:
            home = next((m for star in module.stars if (m := self.module_named(star, module)) is not None
                         and cls_name in m.classes), None)
        cls_node = home.classes.get(cls_name) if home is not None else None
        return (home, cls_node) if home is not None and cls_node is not None else None

    def _inherited(self, expr: ast.AST, method: str, module: Module) -> list[tuple[Module, FunctionNode]]:
        """`self.prepare_inputs(...)` in a class whose base, a class of ours in another module (a mixin), defines
        it; a base's bases are searched too, three deep."""
        owners = [(module, module.enclosing_class(expr))]
        for _ in range(3):
            bases = [found for home, cls_node in owners if cls_node is not None for base in cls_node.bases
                     if (found := self.class_named(last_name(base), home)) is not None]
            for home, cls_node in bases:
                methods = [(home, d) for d in cls_node.body if isinstance(d, FunctionNode) and d.name == method]
                if methods:
                    return methods
            owners = bases  # type: ignore[assignment]
        return []
