"""Which top-level functions and classes the command's code reaches through names its imports resolve.

`callers.reached_names` reaches a definition when any reached code holds its name, wherever that name is defined:
two `test()` functions of two loop modules are reached together, and so is every class a registry's dict or a
config's string may pick. That is the right answer to "may it run?". To "does it surely run?" the answer is
narrower: the definition a name resolves to as Python would look it up (the module's own, or the one its
`from m import x` / `import m` ... `m.x` names), starting from the code that runs when the scripts run (their
top-level code and that of what they import) and going on through what reached functions and classes name in
turn. A finding in a definition reached only the first way is a note the run settles.

A class defined on import is not yet used: `class Seq2SeqLM(PreTrainedModel, GenerationMixin)` in a module the
trainer imports for another class makes no instance, so the methods of its bases run only if something names the
class. What the tracer reaches only once such bases count is kept apart (`Traced.through_bases`): a registry or a
config may build that class, so a finding there is a note the user sees, not one of the code the command skips.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tpuops.check.callers import Definition, called_by_a_framework, runs_on_import, walk_picked
from tpuops.check.entries import WORDS
from tpuops.check.project import LIGHTNING_ROOTS, FunctionNode, Module, Project, dotted, last_name
from tpuops.check.settings import Settings

Place = tuple[str, str]  # (module.rel, name of a top-level definition or Class.method)
# Hooks a framework calls only when asked for that run: Lightning's `trainer.test(...)`, `trainer.predict(...)`.
ON_REQUEST_HOOKS = {"test": ("test_", "on_test_"), "predict": ("predict_", "on_predict_")}
MAX_HOPS = 4  # `from pkg import Net` through pkg/__init__.py's `from .net import Net`, and so on


@dataclass(frozen=True)
class Traced:
    surely: frozenset[Place]  # reached through names the command's code uses
    through_bases: frozenset[Place]  # reached only through the bases of classes defined on import

    def surely_reaches(self, place: Place) -> bool:
        return place in self.surely

    def reaches(self, place: Place) -> bool:
        return place in self.surely or place in self.through_bases


def traced(project: Project, entries: Sequence[str], settings: Settings | None,
           surely_runs: Callable[[str], bool] = lambda rel: True) -> Traced:
    """The top-level definitions the command's code reaches through resolved names (see the module's text), from
    the top-level code of the modules that surely run (`surely_runs`: not those a config or a computed name may
    load)."""
    tracer = _Tracer(project, settings)
    bases: list[tuple[Module, list[ast.expr]]] = []
    for module in (m for m in project.modules if surely_runs(m.rel)):
        top_level = [s for s in module.tree.body if not isinstance(s, FunctionNode | ast.ClassDef)
                     and runs_on_import(s, module, entries)]
        tracer.visit(module, top_level)
        if module.rel in entries and not _calls_its_own(module, top_level):
            for statement in tracer.top[id(module)].values():  # a script driven from outside: any may run
                tracer.driven.add(id(statement))
                tracer.reach(module, statement)
        for statement in module.tree.body:  # decorators run on import too
            if isinstance(statement, FunctionNode | ast.ClassDef):
                tracer.visit(module, statement.decorator_list)
                bases.append((module, getattr(statement, "bases", [])))
                if (statement.decorator_list and module.rel in entries) or _named_command(statement, settings):
                    tracer.reach(module, statement)  # `@hydra.main`, `@app.command()`: the library calls it
    surely = tracer.run()
    for module, heads in bases:
        tracer.visit(module, heads)
    return Traced(surely, tracer.run() - surely)


def _named_command(definition: FunctionNode | ast.ClassDef, settings: Settings | None) -> bool:
    """`@group.command(name="train")` (Click, Typer) on a function the trainer's command names by a bare word
    (`python -m pkg.cli training train`): the library runs it, wherever the module that registers it is."""
    words = settings.given.get(WORDS, frozenset()) if settings is not None else frozenset()
    if not words or isinstance(definition, ast.ClassDef):
        return False
    for decorator in definition.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        if last_name(call.func if call else decorator) != "command":
            continue
        given = next((k.value for k in call.keywords if k.arg == "name"), call.args[0] if call.args else None) \
            if call else None
        if (given.value if isinstance(given, ast.Constant) else _click_name(definition.name)) in words:
            return True
    return False


def _click_name(function: str) -> str:
    """The name Click and Typer give a command from its function: `train_cmd` -> `train`, `run_all` -> `run-all`."""
    for suffix in ("_command", "_cmd", "_group", "_grp"):
        if function.endswith(suffix):
            function = function[: -len(suffix)]
            break
    return function.replace("_", "-")


def _calls_its_own(module: Module, top_level: Sequence[ast.stmt]) -> bool:
    own = {s.name for s in module.tree.body if isinstance(s, FunctionNode | ast.ClassDef)}
    return any(isinstance(n, ast.Name) and n.id in own for s in top_level for n in ast.walk(s))


class _Tracer:
    def __init__(self, project: Project, settings: Settings | None) -> None:
        self.project = project
        self.settings = settings
        self.top = {id(m): {s.name: s for s in m.tree.body if isinstance(s, FunctionNode | ast.ClassDef)}
                    for m in project.modules}
        self.reached: set[Place] = set()
        self.todo: list[tuple[Module, Definition]] = []
        self.attributes: set[str] = set()  # attribute names reached code uses: the methods it may call
        self.waiting: dict[str, list[tuple[Module, ast.ClassDef, FunctionNode]]] = {}  # methods not yet run
        self.full_names = {m.name: m for m in project.modules}
        self.driven: set[int] = set()  # classes of a script driven from outside: any method may run
        self.handed_on: set[int] = set()  # modules of ours used as values
        self.waiting_in_modules: dict[str, list[tuple[Module, Definition]]] = {}  # their functions, by name
        self.on_request: dict[str, list[tuple[Module, ast.ClassDef, FunctionNode]]] = {}  # hooks by their run
        self.imports: dict[int, dict[str, list[tuple[str, str | None]]]] = {}

    def run(self) -> frozenset[Place]:
        while self.todo:
            module, definition = self.todo.pop()
            if isinstance(definition, ast.ClassDef):
                self._reach_class(module, definition)
            else:
                self.visit(module, definition.body)
        return frozenset(self.reached)

    def reach(self, module: Module, definition: Definition) -> None:
        place = (module.rel, definition.name)
        if place not in self.reached:
            self.reached.add(place)
            self.todo.append((module, definition))

    def visit(self, module: Module, nodes: Sequence[ast.AST]) -> None:
        for node in walk_picked(nodes, module, self.settings, sure=True):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                for home, definition in self._resolved(module, node.id, MAX_HOPS):
                    self.reach(home, definition)
                if node.id in module.imported and node.id not in self.top[id(module)]:
                    self._module_as_value(module, node)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self._attribute(module, node)

    def _attribute(self, module: Module, node: ast.Attribute) -> None:
        home = self._module_named_by(module, node.value)
        if home is not None:  # `models.Net`, `nets.resnet.ResNet`
            for found, definition in self._resolved(home, node.attr, MAX_HOPS):
                self.reach(found, definition)
        if node.attr not in self.attributes:
            self.attributes.add(node.attr)
            for owner, cls, method in self.waiting.pop(node.attr, ()):
                self._run_method(owner, cls, method)
            for owner, cls, method in self.on_request.pop(node.attr, ()):
                self._run_method(owner, cls, method)
            for owner, definition in self.waiting_in_modules.pop(node.attr, ()):
                self.reach(owner, definition)

    def _module_as_value(self, module: Module, node: ast.Name) -> None:
        """`steps = bert_steps` ... `steps.train_step(...)`: a module of ours handed on as a value; its functions
        run by the attribute names reached code uses."""
        home = self._module_named_by(module, node)
        if home is None or id(home) in self.handed_on:
            return
        self.handed_on.add(id(home))
        for name, definition in self.top[id(home)].items():
            if name in self.attributes:
                self.reach(home, definition)
            else:
                self.waiting_in_modules.setdefault(name, []).append((home, definition))

    def _reach_class(self, module: Module, cls: ast.ClassDef) -> None:
        methods = [s for s in cls.body if isinstance(s, FunctionNode)]
        # Its bases (whose methods run as its own), its body but its methods, and their decorators run with it.
        self.visit(module, [*cls.bases, *(s for s in cls.body if s not in methods),
                            *(d for method in methods for d in method.decorator_list)])
        for method in methods:
            if self._called(module, method) or id(cls) in self.driven:
                self._run_method(module, cls, method)
            else:
                self.waiting.setdefault(method.name, []).append((module, cls, method))
                run = _on_request(module, method.name)
                if run and called_by_a_framework(method):
                    self.on_request.setdefault(run, []).append((module, cls, method))

    def _called(self, module: Module, method: FunctionNode) -> bool:
        """Named by reached code, or called by a framework: Lightning's test and predict hooks only when the
        code asks for a test or a prediction run (`trainer.test(...)`)."""
        if method.name in self.attributes:
            return True
        run = _on_request(module, method.name)
        return called_by_a_framework(method) and (not run or run in self.attributes)

    def _run_method(self, module: Module, cls: ast.ClassDef, method: FunctionNode) -> None:
        self.reached.add((module.rel, f"{cls.name}.{method.name}"))
        self.visit(module, method.body)

    def _resolved(self, module: Module, name: str, hops: int) -> list[tuple[Module, Definition]]:
        """The top-level definition `name` means in `module`: its own, or the one its imports bring in."""
        if not name or hops < 0:
            return []
        own = self.top[id(module)].get(name)
        if own is not None:
            return [(module, own)]
        found = []
        for source, attribute in self._imports(module).get(name, ()):  # each import of it (one per branch...)
            home = self._module(source, module) if attribute is not None else None
            if home is not None:
                found += self._resolved(home, attribute, hops - 1)
        if found:
            return found
        for star in module.stars:
            home = self._module(star, module)
            if home is not None:
                found += self._resolved(home, name, hops - 1)
        return found

    def _imports(self, module: Module) -> dict[str, list[tuple[str, str | None]]]:
        """Every `from m import x` of the module, by local name: a name imported in two functions from two
        modules (`from train_xla import Trainer`, `from train_gpu import Trainer`) may mean either."""
        if id(module) not in self.imports:
            found: dict[str, list[tuple[str, str | None]]] = {}
            for node in ast.walk(module.tree):
                if isinstance(node, ast.ImportFrom):
                    base = "." * node.level + (node.module or "")
                    for alias in node.names:
                        found.setdefault(alias.asname or alias.name, []).append((base, alias.name))
            self.imports[id(module)] = found
        return self.imports[id(module)]

    def _module_named_by(self, module: Module, expr: ast.AST) -> Module | None:
        """The module of ours `expr` stands for: `net` after `import models.net as net` or `from models import
        net`, `models.net` after `import models`."""
        root, *rest = dotted(expr).split(".")
        if root not in module.imported:
            return None
        source, attribute = module.imported[root]
        base = (source + attribute if source.endswith(".") else f"{source}.{attribute}") if attribute else source
        return self._module(".".join([base, *rest]), module)

    def _module(self, name: str, importer: Module) -> Module | None:
        """The module of ours an import names; `src.data.loader` is src/data/loader.py run from above the code
        directory (`cd .. && python -m src.train`), which the lint reads as data/loader.py."""
        if name.startswith(".") or name.split(".")[0] in self.project.roots:
            found = self.project.module_named(name, importer)
            if found is not None:
                return found
        parts = name.split(".")
        return next((self.full_names[rest] for start in range(1, len(parts))
                     if (rest := ".".join(parts[start:])) in self.full_names), None)


def _on_request(module: Module, method: str) -> str:
    """The run a Lightning hook waits for (`test` for `test_step`), or "" (Keras runs its `test_step` in `fit`
    too, to validate)."""
    if not module.imports_any(LIGHTNING_ROOTS):
        return ""
    return next((run for run, shapes in ON_REQUEST_HOOKS.items() if method.startswith(shapes)), "")


def untraced_owner(node: ast.AST, module: Module, reached: Callable[[Place], bool]) -> str | None:
    """The top-level function or class around `node`, or the method of that class, if no resolved name reaches
    it (None for top-level code)."""
    path = [a for a in module.ancestors(node) if isinstance(a, FunctionNode | ast.ClassDef)][::-1]
    if not path or module.parent(path[0]) is not module.tree:
        return None
    outermost = path[0]
    if not reached((module.rel, outermost.name)):
        return outermost.name
    if isinstance(outermost, ast.ClassDef) and len(path) > 1 and module.parent(path[1]) is outermost:
        method = f"{outermost.name}.{path[1].name}"
        return None if reached((module.rel, method)) else method
    return None


def why_untraced(owner: str, module: Module) -> str:
    """Why a definition `untraced_owner` named in `module` is only guessed to run, said for the user."""
    run = _on_request(module, owner.rsplit(".", 1)[-1]) if "." in owner else ""
    if run:
        return f"Lightning calls {owner} only for trainer.{run}(...), which the command's code does not call"
    return f"no call of the command's code that its imports resolve reaches {owner} (its name may stand for " \
           "another definition, or a registry or a config call it)"
