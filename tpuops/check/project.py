"""The trainer's code directory as the lint sees it: every module parsed once, with what it defines and imports,
so that a step jitted in one module and defined in another is still found. `ast` only: nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
FRAMEWORK_MODULES = ("jax", "torch", "torch_xla", "tensorflow", "flax", "optax", "keras", "haliax", "equinox",
                     "accelerate", "tf_keras")


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


@dataclass
class Module:
    rel: str  # path relative to the code directory, e.g. lib/steps.py
    tree: ast.Module
    source: str
    defs: dict[str, list[FunctionNode]] = field(default_factory=dict)  # every def, nested ones included
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local name -> (module, attribute)
    aliases: set[str] = field(default_factory=set)  # local names bound to framework modules: jnp, xm, tf, nnx, ...
    parents: dict[int, ast.AST] = field(default_factory=dict)  # id(node) -> its parent
    lines: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, rel: str, tree: ast.Module, source: str) -> Module:
        module = cls(rel, tree, source, lines=source.splitlines())
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                module.parents[id(child)] = parent
            if isinstance(parent, FunctionNode):
                module.defs.setdefault(parent.name, []).append(parent)
            elif isinstance(parent, ast.ClassDef):
                module.classes.setdefault(parent.name, parent)
            elif isinstance(parent, ast.Import | ast.ImportFrom):
                module._import(parent)
        return module

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
            self.imported[alias.asname or alias.name] = (base, alias.name)
            if node.module and node.module.split(".")[0] in FRAMEWORK_MODULES:
                self.aliases.add(alias.asname or alias.name)

    @property
    def name(self) -> str:
        parts = self.rel.removesuffix(".py").split("/")
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

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


@dataclass
class Project:
    modules: list[Module]
    by_name: dict[str, Module] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for module in self.modules:
            self.by_name.setdefault(module.name, module)
            # `from steps import x` in a script run from its own directory: the module's last part finds it too
            self.by_name.setdefault(module.name.rsplit(".", 1)[-1], module)

    def module_named(self, name: str, importer: Module) -> Module | None:
        if name.startswith("."):
            package = importer.name.rsplit(".", 1)[0] if "." in importer.name else ""
            name = f"{package}.{name.lstrip('.')}".strip(".")
        return self.by_name.get(name)

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
            return []
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            owner = expr.value.id
            if owner in {"self", "cls"}:
                return [(module, d) for d in module.defs.get(expr.attr, ())]
            source, attribute = module.imported.get(owner, ("", None))
            name = f"{source}.{attribute}" if attribute else source
            target = self.module_named(name, module) if source else None
            if target is not None:
                return [(target, d) for d in target.defs.get(expr.attr, ())]
        return []
