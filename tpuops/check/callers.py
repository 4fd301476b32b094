"""Which of the code directory's functions and classes the trainer's command reaches by the names its code holds.

Importing a module runs its top-level code; that code names functions and classes (`main()`, `Net(cfg)`,
`xmp.spawn(_mp_fn)`), and what they name, named in turn, runs too. A top-level function or class nothing reached
names (a loss a config picks by a string in a YAML file, a model a registry builds, a helper only another script
calls) runs only if something reaches it by a name the source does not hold: what the lint finds there is a
note the run may settle. Asked only when the command names its scripts: without them, any code may be called
from outside.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence

from tpuops.check.project import FunctionNode, Module, Project, dotted

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Definition = FunctionNode | ast.ClassDef


def reached_names(project: Project, entries: Sequence[str]) -> frozenset[str]:
    """The names of the top-level functions and classes the command's code reaches (by name, across modules: two
    definitions of one name are reached together)."""
    defined: dict[str, list[Definition]] = {}
    roots: set[str] = set()
    for module in project.modules:
        own: set[str] = set()
        named: set[str] = set()
        for statement in module.tree.body:
            if isinstance(statement, FunctionNode | ast.ClassDef):
                defined.setdefault(statement.name, []).append(statement)
                own.add(statement.name)
                named |= _names([*statement.decorator_list, *getattr(statement, "bases", [])])
                if statement.decorator_list and not _registered(statement):
                    named.add(statement.name)  # `@hydra.main`, `@app.command()`: the decorator's library calls it
            elif _runs_on_import(statement, module, entries):
                named |= _names([statement])
        if module.rel in entries and not own & named:
            named |= own  # a script whose own code calls none of its functions is driven from outside (a notebook)
        roots |= named
    reached: set[str] = set()
    todo = [name for name in roots if name in defined]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        todo += [n for d in defined[name] for n in _names(d.body) if n in defined and n not in reached]
    return frozenset(reached)


def unreached_owner(node: ast.AST, module: Module, reached: frozenset[str]) -> str | None:
    """The top-level function or class around `node` if nothing the command runs names it (module-level code runs
    on import)."""
    outermost = None
    for ancestor in module.ancestors(node):
        if isinstance(ancestor, FunctionNode | ast.ClassDef):
            outermost = ancestor
    if outermost is None or module.parent(outermost) is not module.tree or outermost.name in reached:
        return None
    return outermost.name


def _registered(definition: Definition) -> bool:
    """`@registry.register_model("visual_bert")`, `@register("adam")`: kept in a table a config or a string picks
    from, at run time, not by the name of the definition."""
    return all("regist" in dotted(d.func if isinstance(d, ast.Call) else d).lower() for d in definition.decorator_list)


def _runs_on_import(statement: ast.stmt, module: Module, entries: Sequence[str]) -> bool:
    """Top-level code runs when the module is imported, but for `__all__` (a list of names to export, not code
    that uses them) and an `if __name__ == "__main__":` block of a module the command only imports."""
    if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                 for t in statement.targets):
        return False
    if isinstance(statement, ast.If) and "__main__" in ast.unparse(statement.test):
        return module.rel in entries
    return True


def _names(nodes: Iterable[ast.AST]) -> set[str]:
    """Every name the code reads (a call, a reference, an attribute) or writes in a string (a registry's
    "models.Net", `getattr(self, "encode")`)."""
    names: set[str] = set()
    for node in _walk(nodes):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
            names.update(WORD.findall(node.value))
    return names


def _walk(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    for node in nodes:
        yield from ast.walk(node)
