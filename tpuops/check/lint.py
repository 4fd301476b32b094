"""Lint the trainer's source: every `.py` file `push` would send (code.exclude and .tpuopsignore honoured),
parsed with `ast` once, no framework imported, and read as one project (a step jitted in one module may be
defined in another). `# tpuops: ignore[XLA003]` on a line silences that rule there.
"""

from __future__ import annotations

import ast
import gc
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath

from tpuops.check.callers import Reached, reached_names, unreached_owner
from tpuops.check.file_rules import FILE_RULES
from tpuops.check.findings import Finding
from tpuops.check.host_loops import host_loop_notes
from tpuops.check.host_reads import formats_a_value
from tpuops.check.lint_rules import RULES_BY_ID, STEP_RULES, Rule, grows_by_concatenation
from tpuops.check.project import FunctionNode, Module, Project, last_name
from tpuops.check.reach import CommandScope, a_test
from tpuops.check.regions import switched_off
from tpuops.check.scopes import StepFinder
from tpuops.check.settings import Settings, trainer_on_tpu
from tpuops.check.settle import Anchor, Guess, Key, as_guess, counted_line, is_loop
from tpuops.check.steps import Step
from tpuops.check.traced import Traced, traced, untraced_owner, why_untraced
from tpuops.check.wrappers import host_callback
from tpuops.remote.manifest import scan_tree

IPYTHON_LINE = re.compile(r"^([ \t]*)[!%].*$", re.MULTILINE)  # `!pip install x`, `%matplotlib inline`
IGNORE_RE = re.compile(r"#\s*tpuops:\s*ignore\[([A-Za-z0-9_,\s-]+)\]")
# A file importing one of these may run on the TPU, whatever it says of CUDA.
XLA_FRAMEWORK_ROOTS = frozenset({"torch_xla", "jax", "flax", "tensorflow", "keras", "accelerate", "optax", "equinox",
                                 "ignite"})  # (Ignite's idist picks XLA by its backend's name, not by an import)


@dataclass(frozen=True)
class LintResult:
    findings: tuple[Finding, ...]
    files: int
    ignored: int
    functions: Mapping[str, tuple[str, int]]  # every function the code defines -> (file, line) of its def
    steps: tuple[Step, ...] = ()  # the compiled steps recognised (XLA001-003 apply only inside them)
    advice: tuple[Finding, ...] = ()  # notes: likely costs the source alone cannot confirm (they do not fail)
    scope: CommandScope = CommandScope()  # which files the trainer's command runs
    anchors: Mapping[Key, Anchor] = field(default_factory=dict)  # where each finding and note sits (for the run)

    @property
    def steps_found(self) -> list[dict[str, object]]:
        return [s.as_dict() for s in self.steps if s.root]


def python_files(root: Path, exclude: Sequence[str]) -> list[str]:
    """The `.py` files of the code directory that `push` would send, relative to it."""
    if root.is_file():
        return [root.name] if root.suffix == ".py" else []
    return [entry.path for entry in scan_tree(root, exclude).entries if entry.path.endswith(".py") and not entry.link]


def lint_tree(root: Path, exclude: Sequence[str] = (), legacy_node: bool = False,
              commands: Sequence[str] = ()) -> LintResult:
    """Lint the code directory (or one file) `root`. Given the trainer's `commands`, only the code they run: their
    scripts and what these import (every file when that cannot be told)."""
    with _collector_paused():
        return _lint_tree(root, exclude, legacy_node, commands)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Parsing builds hundreds of thousands of AST nodes that all stay alive until the lint ends: Python's cyclic
    collector, triggered by each 700 new objects, walks them again and again for nothing (half the lint's time on
    a 20,000-line code directory). Reference counting still frees what the lint drops; cycles wait for the end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _lint_tree(root: Path, exclude: Sequence[str], legacy_node: bool, commands: Sequence[str]) -> LintResult:
    base = root.parent if root.is_file() else root
    broken: dict[str, Finding] = {}
    parsed: list[Module] = []
    for rel in python_files(root, exclude):
        source = (base / rel).read_text(errors="replace")
        try:
            tree = ast.parse(source, filename=rel)
        except SyntaxError as err:
            broken[rel], tree = _unparsable(rel, source, err)
        parsed.append(Module.of(rel, tree, source))
    scope = CommandScope.of(commands, base, parsed)
    modules = [m for m in parsed if scope.runs(m.rel)]
    findings = [finding for rel, finding in broken.items() if scope.runs(rel)]
    project = Project(modules)
    finder = StepFinder(project, scope.options)
    steps = finder.find()
    found = _findings(finder, steps, legacy_node, scope)
    everything = project if len(modules) == len(parsed) else Project(parsed)  # the run may reach any of them
    functions = {name: (defs[0][0].rel, defs[0][1].lineno) for name, defs in everything.definitions.items()}
    ordered = sorted(steps, key=lambda s: (s.module.rel if s.module else "", s.line))
    advice = found.notes() + [n for m in modules if id(m) not in found.off
                              for n in host_loop_notes(m) if n.rule not in _ignored_rules(m, n.line or 0)]
    return LintResult(tuple(findings + found.sure()), len(modules), found.ignored, functions, tuple(ordered),
                      tuple(advice), scope, found.anchors)


def _unparsable(rel: str, source: str, err: SyntaxError) -> tuple[Finding, ast.Module]:
    """XLA000 for a file Python cannot parse, and what can still be read of it: a notebook exported as a script
    keeps its shell and magic lines (`!pip install ...`, `%matplotlib inline`); without them the rest parses, and
    is linted. Otherwise an empty module, which others may still import by its name."""
    first = IPYTHON_LINE.search(source)
    if first is not None:
        with suppress(SyntaxError):
            tree = ast.parse(IPYTHON_LINE.sub(lambda m: m.group(1) + "pass", source), filename=rel)
            return Finding("XLA000", "syntax", "cannot parse: a notebook's shell or magic line (`!...`, `%...`), "
                           "which Python cannot run; the rest was read without them", "remove the notebook lines, "
                           "or run the notebook's commands in the trainer's setup", rel,
                           source.count("\n", 0, first.start()) + 1), tree
    python = f"{sys.version_info.major}.{sys.version_info.minor}"  # (3.12 parses f-strings 3.11 cannot)
    return Finding("XLA000", "syntax", f"cannot parse with Python {python}: {err.msg}", "fix the syntax error, or "
                   "run `tpuops check` with the Python the trainer is written for", rel, err.lineno), \
        ast.Module(body=[], type_ignores=[])


def lint_module(tree: ast.Module, source: str, rel: str, legacy_node: bool = False) -> tuple[list[Finding], int]:
    """One module on its own (what a code directory of one file is)."""
    finder = StepFinder(Project([Module.of(rel, tree, source)]))
    found = _findings(finder, finder.find(), legacy_node, CommandScope())
    return sorted(found.sure() + found.notes(), key=lambda f: (f.line or 0, f.rule)), found.ignored


@dataclass
class _Found:
    """What the step and file rules found: findings by (file, rule, line), with where each sits."""

    findings: dict[Key, Finding]
    anchors: dict[Key, Anchor]
    guesses: dict[Key, str]  # found only where the source cannot be sure -> why it is a guess
    ignored: int
    off: set[int]  # the modules off the TPU (`off_the_tpu`), decided once per file

    def sure(self) -> list[Finding]:
        return [f for key, f in self._ordered() if key not in self.guesses]

    def notes(self) -> list[Finding]:
        """Findings the source alone cannot make sure of (see `_guess`): they do not fail the check."""
        return [as_guess(f, self.guesses[key]) for key, f in self._ordered() if key in self.guesses]

    def _ordered(self) -> list[tuple[Key, Finding]]:
        return sorted(self.findings.items(), key=lambda item: (item[0][0], item[0][2], item[0][1]))


def _findings(finder: StepFinder, steps: list[Step], legacy_node: bool, scope: CommandScope) -> _Found:
    lazy = {id(step.module) for step in steps if step.kind == "lazy"}
    off = {id(module) for module in finder.project.modules
           if off_the_tpu(module, scope, ends_xla_steps=id(module) in lazy)}
    found = _Found({}, {}, {}, 0, off)
    ignored: set[Key] = set()
    reached = cache(lambda: Reach(reached_names(finder.project, scope.entries, finder.settings),
                                  traced(finder.project, scope.entries, finder.settings, scope.surely_runs)))
    for rule, module, node, message, step in _hits(finder, steps, legacy_node):
        if id(module) in off and not _called_on_the_tpu(step, lazy - off, finder.project):
            continue
        line = getattr(node, "lineno", 0)
        key = (module.rel, rule.id, line)
        if rule.id in _ignored_rules(module, line):
            ignored.add(key)
        elif key not in found.findings:
            guess = _guess(rule.id, node, module, step, scope, reached, finder.settings, finder.project)
            found.findings[key] = Finding(rule.id, rule.name, message, rule.hint, module.rel, line)
            found.anchors[key] = _anchor(module, node, step, guess)
            if guess:
                found.guesses[key] = guess.why
        elif key in found.guesses and not _guess(rule.id, node, module, step, scope, reached, finder.settings,
                                                  finder.project):
            del found.guesses[key]
            found.anchors[key] = _anchor(module, node, step, None)
    for file, rule, line in list(found.findings):  # padding inside a step: the step's dynamic shape says it, once
        if rule == "XLA004" and {(file, "XLA002", line)} & (found.findings.keys() | ignored):
            del found.findings[(file, rule, line)]
    found.ignored = len(ignored)
    return found


def _called_on_the_tpu(step: Step | None, on_tpu: set[int], project: Project) -> bool:
    """A helper of a module shared with the GPU scripts (`utils.clip_gradients`), called from a module whose
    PyTorch/XLA steps run on the TPU (`on_tpu`): it runs there too."""
    if step is None or not step.called or not isinstance(step.node, FunctionNode):
        return False
    return any(id(module) in on_tpu for module, _ in project.callers(step.node))


def _guess(rule: str, node: ast.AST, module: Module, step: Step | None, scope: CommandScope,
           reached: Callable[[], Reach], settings: Settings, project: Project) -> Guess | None:
    """Why the source alone cannot make sure of a finding (it is then a note the run may settle), or None."""
    if not scope.surely_runs(module.rel):
        return Guess("unreached", f"no script of the command imports {module.rel} by a name the source holds")
    owner = unreached_owner(node, module, reached().by_name) if scope.entries else None
    if owner is not None and owner[1]:
        return Guess("unreached", f"the command's code names {owner[0]} only in a branch a setting's value picks")
    if owner is not None:
        return Guess("unreached", f"no code the command runs names {owner[0]} (a config or a registry may build it)")
    untraced = untraced_owner(node, module, reached().traced.surely_reaches) if scope.entries else None
    if untraced is not None and untraced_owner(node, module, reached().traced.reaches) is None:
        return Guess("base", f"the command's code reaches {untraced} only through the base of a class defined on "
                             "import, which a registry or a config may build")
    if untraced is not None:
        return Guess("unreached", why_untraced(untraced, module))
    switch = _behind_a_switch(node, module, settings, project)
    if switch is not None:
        return Guess("unreached", f"it runs only when `{ast.unparse(switch)}` is on, which the command leaves off")
    if step is not None and not step.sure:
        return Guess("step", f"{step.name} may not run every step")
    if step is not None and rule == "XLA002" and grows_by_concatenation(node, module):
        return Guess("value", "a tensor grown in a loop changes its shape each time round only if the loop runs "
                              "more than once per step; the run counts the compilations")
    if step is not None and step.kind in {"lazy", "torch"} and \
            (rule == "XLA001" or (rule == "XLA003" and formats_a_value(node))):  # (how often it runs cannot tell)
        return Guess("value", "the value is taken for a device tensor by its name and use; the run sees whether "
                              "reading it cuts the graph")
    if step is not None and step.called:
        return Guess("step", f"{step.name} is {step.how}: the source alone cannot show that this line runs in "
                             "every step, on device tensors")
    if step is not None and step.kind == "jax" and isinstance(node, ast.Call) and host_callback(node) and \
            _after_its_scan(node, step, module):
        return Guess("step", f"it follows the scan of {step.name}'s own updates, so it runs once per call of "
                             f"{step.name}, which may train the whole run")
    if step is not None and step.kind == "jax" and _fails_tracing(rule, node):
        return Guess("trace", "given a traced value, JAX raises here while tracing the step, so the first run "
                              "shows it; given a static one, it costs nothing")
    return _padding_or_float16(rule) if step is None else None


def _behind_a_switch(node: ast.AST, module: Module, settings: Settings, project: Project | None = None) \
        -> ast.AST | None:
    """The test of an `if` whose body holds `node` (the step loop itself, say, under `if args.debug_mode:`) and
    that is off by default or as the command passes it; a step leaves such branches out of its own region. Given
    the `project`, also a switch around every call of the module-level function holding `node` (`if
    args.private_output is not None: predict_private(...)`)."""
    child = node
    for ancestor in module.ancestors(node):
        if isinstance(ancestor, ast.If) and child in ancestor.body and switched_off(ancestor.test, module, settings):
            return ancestor.test
        child = ancestor
    function = module.enclosing_function(node)
    if project is None or function is None or module.parents.get(id(function)) is not module.tree:
        return None
    switches = [_behind_a_switch(call, m, settings) for m, call in project.callers(function)]
    return switches[0] if switches and all(switches) else None


def _padding_or_float16(rule: str) -> Guess | None:
    """Padding to the longest (XLA004) and float16 (XLA005), which file rules find anywhere: whether they cost the
    TPU anything is not in the source. Padding changes shapes only if the examples' lengths differ (text cut to
    fixed blocks, audio padded once, gives one shape); float16 is one of the paths code offers (a GPU branch, an
    export, a library's option), which the training may not take."""
    if rule == "XLA004":
        return Guess("data", "padding to the longest changes the shape only if the examples' lengths differ; the "
                             "run counts the compilations")
    if rule == "XLA005":
        return Guess("reach", "float16 is one of the paths the code offers; the run shows whether the training "
                              "takes it")
    return None


@dataclass(frozen=True)
class Reach:
    by_name: Reached  # what the command's code may reach, by the names it holds
    traced: Traced  # what it surely reaches, through names its imports resolve


def _after_its_scan(call: ast.Call, step: Step, module: Module) -> bool:
    """`jax.debug.callback(log, metrics)` in `train`'s own body after `lax.scan(_update_step, ...)` (PureJaxRL's
    shape): the scan runs the updates; what follows it runs once per call of `train`."""
    if step.node is None or module.enclosing_function(call) is not step.node:
        return False
    if not step.root and not step.called:
        return False  # a function a scan runs (`used by` its caller) runs every update: so does its end
    loops = {"scan", "fori_loop", "while_loop"}
    return any(isinstance(n, ast.Call) and last_name(n.func) in loops and n.lineno < call.lineno and
               module.enclosing_function(n) is step.node for n in ast.walk(step.node))


def _fails_tracing(rule: str, node: ast.AST) -> bool:
    """A Python branch, a data-dependent shape or a host conversion of a traced JAX value: not a cost every
    step but an error at tracing (a host callback, `jax.debug.print`, is the cost every step)."""
    if rule in {"XLA001", "XLA002"}:
        return True
    return rule == "XLA003" and not (isinstance(node, ast.Call) and host_callback(node))


def _anchor(module: Module, node: ast.AST, step: Step | None, guess: Guess | None) -> Anchor:
    statement = node
    while not isinstance(statement, ast.stmt) and module.parent(statement) is not None:
        statement = module.parent(statement)  # type: ignore[assignment]
    first = getattr(statement, "lineno", 0)
    kind = guess.kind if guess else ""
    if step is None or step.module is None or step.node is None:
        return Anchor(first, guess=kind)
    return Anchor(first, step.module.rel, counted_line(step.node), step.kind == "lazy", is_loop(step.node), kind)


def _hits(finder: StepFinder, steps: list[Step],
          legacy_node: bool) -> Iterator[tuple[Rule, Module, ast.AST, str, Step | None]]:
    for step in steps:
        if step.module is None or step.node is None or not isinstance(step.node, FunctionNode | ast.Lambda |
                                                                      ast.For | ast.AsyncFor | ast.While):
            continue
        values, nodes = finder.values(step), finder.region(step)
        for rule_id, check in STEP_RULES.items():
            for node, message in check(step, values, nodes):
                yield RULES_BY_ID[rule_id], step.module, node, message, step
    settings = finder.settings
    for module in finder.project.modules:
        for rule_id, check in FILE_RULES.items():
            rule = RULES_BY_ID[rule_id]
            if rule.node_only and not legacy_node:
                continue
            for node, message in check(module, settings):
                yield rule, module, node, message, None


def off_the_tpu(module: Module, scope: CommandScope, ends_xla_steps: bool = False) -> bool:
    """A file the training never runs on the TPU: a unit test (`tests/`, `test_*.py`, `*_test.py`) the command's
    scripts do not import, code put away (`archived/`, `deprecated/`, `unused/`), unless the trainer's command
    runs it as its script, or a GPU program (it moves work to CUDA and imports nothing of PyTorch/XLA, JAX,
    TensorFlow or Accelerate, nor `ends_xla_steps`: calls a helper of the project that ends a PyTorch/XLA step,
    `from core.accelerator import mark_step`, in its loops)."""
    put_away = {"test", "archive", "archived", "deprecated", "unused"} & set(PurePosixPath(module.rel).parts[:-1])
    imported = scope.files is not None and module.rel in scope.files  # (`from process.test_loop import test`)
    if module.rel not in scope.entries and (put_away or (a_test(module.rel) and not imported)):
        return True
    if module.imports_any(XLA_FRAMEWORK_ROOTS) or trainer_on_tpu([module]) or ends_xla_steps:
        return False
    return any(last_name(call.func) == "cuda" or any(isinstance(a, ast.Constant) and a.value == "cuda"
                                                     for a in call.args) for call in module.calls)


def _ignored_rules(module: Module, line: int) -> set[str]:
    match = IGNORE_RE.search(module.line(line))
    return {part.strip().upper() for part in match.group(1).split(",")} if match else set()
