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
from dataclasses import dataclass

from tpuops.check.project import FunctionNode, Module, Project, dotted, params_of
from tpuops.check.settings import Settings

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Definition = FunctionNode | ast.ClassDef


@dataclass(frozen=True)
class Reached:
    """The names of the top-level functions and classes the command's code reaches: `surely` past no branch that
    compares a setting with a text the code does not decide (`if config.cores == "multi":`, one of several
    trainers picked at run time), `maybe` past such branches too. A branch the setting's known values never take
    reaches nothing."""

    surely: frozenset[str]
    maybe: frozenset[str]


def reached_names(project: Project, entries: Sequence[str], settings: Settings | None = None) -> Reached:
    """What the command's code reaches by name (across modules: two definitions of one name are reached
    together; `from m import train as train_m` reaches `train` when `train_m` is named)."""
    defined: dict[str, list[tuple[Module, Definition]]] = {}
    roots: dict[bool, set[str]] = {True: set(), False: set()}
    for module in project.modules:
        own: set[str] = set()
        named: dict[bool, set[str]] = {True: set(), False: set()}
        for statement in module.tree.body:
            if isinstance(statement, FunctionNode | ast.ClassDef):
                defined.setdefault(statement.name, []).append((module, statement))
                own.add(statement.name)
                heads = [*statement.decorator_list, *getattr(statement, "bases", [])]
                for sure in (True, False):
                    named[sure] |= _names(heads, module, settings, sure)
                if statement.decorator_list and not _registered(statement):
                    for sure in (True, False):  # `@hydra.main`, `@app.command()`: the decorator's library calls it
                        named[sure].add(statement.name)
            elif runs_on_import(statement, module, entries):
                for sure in (True, False):
                    named[sure] |= _names([statement], module, settings, sure)
        for sure in (True, False):
            if module.rel in entries and not own & named[False]:
                named[sure] |= own  # a script whose own code calls none of its functions is driven from outside
            roots[sure] |= named[sure]
    aliases = _import_aliases(project)
    return Reached(*(_closure(roots[sure], defined, aliases, settings, sure) for sure in (True, False)))


def _closure(roots: set[str], defined: dict[str, list[tuple[Module, Definition]]], aliases: dict[str, set[str]],
             settings: Settings | None, sure: bool) -> frozenset[str]:
    """Names reached from `roots`: what a reached function's body names; for a reached class, what its own body
    names and the bodies of those of its methods a framework calls (`forward`, `training_step`, `__init__`) or
    that reached code names (`model.set_beam_decoder(...)`), not its other methods'."""
    reached: set[str] = set()
    methods: dict[str, list[tuple[Module, FunctionNode]]] = {}  # methods of reached classes, by name, not walked
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        todo += aliases.get(name, ())
        for module, method in methods.pop(name, ()):
            todo += [n for n in _names(method.body, module, settings, sure) if n not in reached]
        for module, definition in defined.get(name, ()):
            if isinstance(definition, ast.ClassDef):
                todo += [n for n in _class_names(definition, module, settings, sure, reached, methods)
                         if n not in reached]
            else:
                todo += [n for n in _names(definition.body, module, settings, sure) if n not in reached]
    return frozenset(name for name in reached if name in defined)


def _class_names(cls: ast.ClassDef, module: Module, settings: Settings | None, sure: bool, reached: set[str],
                 methods: dict[str, list[tuple[Module, FunctionNode]]]) -> set[str]:
    """What a reached class names now: its body but its methods, and its methods a framework calls or reached
    code names; the others wait in `methods` until their name is reached."""
    names = _names([s for s in cls.body if not isinstance(s, FunctionNode)], module, settings, sure)
    for method in (s for s in cls.body if isinstance(s, FunctionNode)):
        names |= _names(method.decorator_list, module, settings, sure)
        if called_by_a_framework(method) or method.name in reached:
            names |= _names(method.body, module, settings, sure)
        else:
            methods.setdefault(method.name, []).append((module, method))
    return names


# Methods frameworks call by their names: Python's (`__init__`, `__call__`), PyTorch's, Lightning's, Keras's,
# Hugging Face's, datasets' and optimizers'.
FRAMEWORK_METHODS = {"forward", "call", "build", "setup", "teardown", "prepare_data", "step", "compute_loss",
                     "get_config", "from_config", "reset", "update", "compute", "result", "apply", "init",
                     "loss", "run", "fit", "evaluate", "predict", "generate", "encode", "decode", "update_state",
                     "reset_state", "reset_states"}
FRAMEWORK_METHOD_SHAPES = ("on_", "configure_", "training_", "validation_", "test_", "predict_", "train_",
                           "eval_", "_step", "_epoch_end", "_dataloader", "_batch_end", "_start", "_end")


def called_by_a_framework(method: FunctionNode) -> bool:
    name = method.name
    return name.startswith("__") or name in FRAMEWORK_METHODS or \
        any(name.startswith(shape) or name.endswith(shape) for shape in FRAMEWORK_METHOD_SHAPES)


def _import_aliases(project: Project) -> dict[str, set[str]]:
    """`as` name -> the names it imports (`from process.test_multi import test as test_multi`)."""
    aliases: dict[str, set[str]] = {}
    for module in project.modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.asname and alias.asname != alias.name:
                        aliases.setdefault(alias.asname, set()).add(alias.name)
    return aliases


def unreached_owner(node: ast.AST, module: Module, reached: Reached) -> tuple[str, bool] | None:
    """The top-level function or class around `node` if the command's code does not surely reach it (module-level
    code runs on import), and whether it reaches it at all (through a branch a setting's value picks)."""
    outermost = None
    for ancestor in module.ancestors(node):
        if isinstance(ancestor, FunctionNode | ast.ClassDef):
            outermost = ancestor
    if outermost is None or module.parent(outermost) is not module.tree or outermost.name in reached.surely:
        return None
    return outermost.name, outermost.name in reached.maybe


def _registered(definition: Definition) -> bool:
    """`@registry.register_model("visual_bert")`, `@register("adam")`: kept in a table a config or a string picks
    from, at run time, not by the name of the definition."""
    return all("regist" in dotted(d.func if isinstance(d, ast.Call) else d).lower() for d in definition.decorator_list)


def runs_on_import(statement: ast.stmt, module: Module, entries: Sequence[str]) -> bool:
    """Top-level code runs when the module is imported, but for `__all__` (a list of names to export, not code
    that uses them) and an `if __name__ == "__main__":` block of a module the command only imports."""
    if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                 for t in statement.targets):
        return False
    if isinstance(statement, ast.If) and "__main__" in ast.unparse(statement.test):
        return module.rel in entries
    return True


def _names(nodes: Iterable[ast.AST], module: Module, settings: Settings | None, sure: bool) -> set[str]:
    """Every name the code reads (a call, a reference, an attribute) or writes in a string (a registry's
    "models.Net", `getattr(self, "encode")`), past the branches `_branches` lets through."""
    names: set[str] = set()
    compared: set[int] = set()  # texts a value is compared with (`name in ("BeamSearchLSTM", ...)`) name nothing
    for node in walk_picked(nodes, module, settings, sure):
        if isinstance(node, ast.Compare):
            compared |= {id(n) for part in (node.left, *node.comparators) for n in ast.walk(part)
                         if isinstance(n, ast.Constant)}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200 and \
                id(node) not in compared:
            names.update(WORD.findall(node.value))
    return names


def walk_picked(nodes: Iterable[ast.AST], module: Module, settings: Settings | None, sure: bool) -> Iterator[ast.AST]:
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring names nothing
        yield node
        if isinstance(node, ast.If) and _picks_by_text(node.test) is not None:
            stack.append(node.test)
            stack += [n for branch in _branches(node, module, settings, sure) for n in branch]
            continue
        stack.extend(ast.iter_child_nodes(node))


def _branches(branch: ast.If, module: Module, settings: Settings | None, sure: bool) -> list[list[ast.stmt]]:
    """The sides of `if <setting> == "text":` that may run: the ones the setting's known values (its default, or
    what the command passes) take; with the values unknown (a function's parameter: its callers decide), both,
    but neither surely."""
    picked = _picks_by_text(branch.test)
    assert picked is not None
    setting, texts, equal = picked
    function = module.enclosing_function(setting)
    parameter = isinstance(setting, ast.Name) and function is not None and setting.id in params_of(function)
    values = settings.values(setting, module) if settings is not None and not parameter else frozenset()
    if not values:
        return [] if sure else [branch.body, branch.orelse]
    hit = bool(values & texts)
    rest = bool(values - texts)
    taken = (hit, rest) if equal else (rest, hit)
    return [side for side, runs in zip((branch.body, branch.orelse), taken, strict=True) if runs]


def _picks_by_text(test: ast.AST) -> tuple[ast.AST, frozenset[object], bool] | None:
    """`config.cores == "multi"`, `args.model in ("a", "b")`, `mode != "test"`: (the setting, the texts, whether
    the body runs when the setting is one of them); not `__name__ == "__main__"`."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and
            isinstance(test.ops[0], ast.Eq | ast.NotEq | ast.In | ast.NotIn)):
        return None
    setting, other = test.left, test.comparators[0]
    elements = other.elts if isinstance(other, ast.Tuple | ast.List | ast.Set) else [other]
    texts = frozenset(e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str))
    if not texts or len(texts) != len(elements) or not isinstance(setting, ast.Name | ast.Attribute | ast.Subscript) \
            or dotted(setting) == "__name__":
        return None
    return setting, texts, isinstance(test.ops[0], ast.Eq | ast.In)
