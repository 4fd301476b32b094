"""The code a trainer's command runs: its scripts and every module of the code directory they import, directly
or not, as Python would (`import a.b` runs a/__init__.py too; imports inside functions count). Code nothing
imports (another experiment's scripts, an inference app, the original GPU trainer next to its TPU port) is not
the trainer's: the lint leaves it out.

When in doubt a module is reached: an import found nowhere at the expected place reaches every module of that
name; `importlib.import_module("models." + name)` may reach any module of the package but its tests (what the
lint finds there is a note, which the run settles); a name built from nothing known, or a
module loaded from a path, reaches everything (the caller then lints every file, and tells the files surely
reached from the others). A string naming a module or a
script of ours (a registry's "models.resnet.ResNet", `subprocess.run(["python", "eval.py"])`) reaches it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tpuops.check.entries import read_command
from tpuops.check.project import Module, dotted

DYNAMIC_IMPORTS = {"importlib.import_module", "import_module", "__import__"}
PATH_LOADERS = {"spec_from_file_location", "run_path", "load_source", "SourceFileLoader"}
# Builders of objects from class paths written in config files (HyperPyYAML `!new:pkg.Model`, Hydra `_target_`,
# a registry's `type=`), which the lint does not read: any module may run.
CONFIG_BUILDERS = {"load_hyperpyyaml", "instantiate", "build_from_cfg", "locate", "get_class", "get_method",
                   "import_string", "import_from_string", "dynamic_import", "instantiate_from_config"}
SOURCE_ROOTS = ("", "src")  # where absolute imports start besides the scripts' own directories
# "model.pt" names a file, not the module model.py: strings ending so are not module paths
FILE_SUFFIXES = {"pt", "pth", "ckpt", "bin", "safetensors", "yaml", "yml", "json", "txt", "csv", "tsv", "log", "md",
                 "npy", "npz", "pkl", "h5", "cfg", "ini", "tar", "gz", "zip", "jpg", "png", "wav", "sh"}


@dataclass(frozen=True)
class CommandScope:
    """What the lint reads of the code directory: the files the trainer's commands run, or every file."""
    entries: tuple[str, ...] = ()  # the scripts the commands run
    files: frozenset[str] | None = None  # the files they run; None: every file
    left_out: tuple[str, ...] = ()  # the code directory's other files, which no command runs
    options: Mapping[str, frozenset[object]] = field(default_factory=dict)  # what the commands pass their scripts
    why_every_file: str = ""  # commands were given, yet every file is read: why
    sure: frozenset[str] | None = None  # then, the files their imports surely reach (None: all of them)

    def runs(self, rel: str) -> bool:
        return self.files is None or rel in self.files

    def surely_runs(self, rel: str) -> bool:
        """Not only maybe, through a module loaded by a name the source does not hold."""
        return self.runs(rel) and (self.sure is None or rel in self.sure)

    @classmethod
    def of(cls, commands: Sequence[str], base: Path, modules: Sequence[Module]) -> CommandScope:
        """The scope of `commands` run from `base`, the code directory whose parsed `modules` are given."""
        if not commands:
            return cls()
        reads = [(command, read_command(command, base)) for command in commands]
        entries = tuple(dict.fromkeys(e for _, read in reads for e in read.scripts))
        options = _merged([read.options for _, read in reads])
        if not entries:
            return cls(options=options, why_every_file="the command runs no Python file of the code directory "
                                                       "that the lint can find (an installed program?)")
        files: set[str] = set()
        maybe: set[str] = set()
        unknown = ""
        for command, read in reads:
            if read.scripts:
                reach = reached(modules, read.scripts, command.split(), base.name)
                files |= reach.files
                maybe |= reach.maybe
                unknown = unknown or reach.unknown
        if unknown:
            return cls(entries, options=options, why_every_file=f"{unknown}, so any module may run",
                       sure=frozenset(files))
        if not files:
            return cls(entries, options=options, why_every_file="the command's scripts are not linted (code.exclude)")
        runs = files | maybe
        return cls(entries, frozenset(runs), tuple(sorted(m.rel for m in modules if m.rel not in runs)), options,
                   sure=frozenset(files) if maybe - files else None)


def _merged(options: Sequence[Mapping[str, frozenset[object]]]) -> dict[str, frozenset[object]]:
    """Several commands' options: a setting may take the value any of them passes."""
    merged: dict[str, frozenset[object]] = {}
    for given in options:
        for name, values in given.items():
            merged[name] = merged.get(name, frozenset()) | values
    return merged


@dataclass(frozen=True)
class Reach:
    files: set[str]  # what running the entries surely imports, the entries included (empty: no entry is linted)
    unknown: str = ""  # why more may run: the code loads modules by names the source does not hold
    maybe: set[str] = field(default_factory=set)  # what a name built on a known prefix may load (`"models." + x`)


def reached(modules: Sequence[Module], entries: Sequence[str], command_words: Iterable[str] = (),
            own_name: str = "") -> Reach:
    """The files (relative paths) that running `entries` imports. `own_name`: the code directory's name, which
    imports may start with when it is a package (`import cosyvoice.llm` from inside cosyvoice/)."""
    index = _Index(modules, entries, own_name)
    todo = [m for m in modules if m.rel in set(entries)]
    if not todo:  # the scripts are excluded from the lint, or not Python: nothing to start from
        return Reach(set())
    seen = {m.rel for m in todo}
    todo += [m for m in index.named_in_strings(command_words) if m.rel not in seen]
    seen |= {m.rel for m in todo}
    sure = _closure(index, todo, seen)
    reached_at_all = sure
    while maybe := [m for m in index.maybe if m.rel not in reached_at_all]:  # (they may load more by names)
        reached_at_all = _closure(index, maybe, reached_at_all | {m.rel for m in maybe})
    return Reach(sure, index.unknown, reached_at_all - sure)


def _closure(index: _Index, todo: list[Module], seen: set[str]) -> set[str]:
    """`seen` and every module that what is in `todo` imports, directly or not."""
    seen, todo = set(seen), list(todo)
    while todo:
        module = todo.pop()
        for found in index.imported_by(module):
            if found.rel not in seen:
                seen.add(found.rel)
                todo.append(found)
    return seen


class _Index:
    def __init__(self, modules: Sequence[Module], entries: Sequence[str], own_name: str) -> None:
        self.modules = modules
        self.own_prefix = f"{own_name}." if own_name.isidentifier() else ""
        self.launchers = set(entries[:1]) if len(entries) > 1 else set()  # a script running the command's others
        self.by_name = {m.name: m for m in modules}
        entry_dirs = {".".join(entry.split("/")[:-1]) for entry in entries}
        self.roots = tuple(dict.fromkeys((*sorted(entry_dirs), *SOURCE_ROOTS)))
        self.unknown = ""  # the first load of a module the source cannot name, said as a reason
        self.maybe: list[Module] = []  # modules a name built on a known prefix may load (not a test module)

    def imported_by(self, module: Module) -> Iterator[Module]:
        strings: list[str] = []
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield from self.absolute(alias.name, module, with_parents=True)
            elif isinstance(node, ast.ImportFrom):
                yield from self._from_import(node, module)
            elif isinstance(node, ast.Call):
                yield from self._dynamic(node, module)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
                strings.append(node.value)
        yield from self.named_in_strings(strings)

    def _from_import(self, node: ast.ImportFrom, module: Module) -> Iterator[Module]:
        if node.level:
            base = module.resolved("." * node.level + (node.module or ""))
            names = [base] + [f"{base}.{a.name}".strip(".") for a in node.names if a.name != "*"]
            for name in names:
                yield from self._parents_and_self(name)
            return
        yield from self.absolute(node.module or "", module, with_parents=True)
        for alias in node.names:  # `from pkg import train`: train may be a submodule
            if alias.name != "*":
                yield from self.absolute(f"{node.module}.{alias.name}", module, with_parents=False, missing_ok=True)

    def absolute(self, name: str, importer: Module, with_parents: bool, missing_ok: bool = False) -> list[Module]:
        """The modules an absolute import of `name` runs: looked up from the entries' directories, the code
        directory and src/ (and the importer's own package, where a script's directory is on sys.path);
        found nowhere there, every module whose name ends with it (the code may extend sys.path)."""
        package = importer.name.rsplit(".", 1)[0] if "." in importer.name else ""
        for root in (*self.roots, package):
            full = f"{root}.{name}" if root else name
            if full in self.by_name:
                return list(self._parents_and_self(full, stop=root)) if with_parents else [self.by_name[full]]
        if self.own_prefix and name.startswith(self.own_prefix):
            return self.absolute(name.removeprefix(self.own_prefix), importer, with_parents, missing_ok)
        if missing_ok:
            return []
        return [m for m in self.modules if m.name == name or m.name.endswith(f".{name}")]

    def _parents_and_self(self, name: str, stop: str = "") -> Iterator[Module]:
        parts = name.split(".")
        first = len(stop.split(".")) + 1 if stop else 1
        for end in range(first, len(parts) + 1):
            found = self.by_name.get(".".join(parts[:end]))
            if found is not None:
                yield found

    def _dynamic(self, call: ast.Call, module: Module) -> Iterator[Module]:
        name = dotted(call.func)
        if name.rsplit(".", 1)[-1] in CONFIG_BUILDERS:
            self._unknown(f"it builds objects from class paths in config files ({name.rsplit('.', 1)[-1]})")
            return
        if name.rsplit(".", 1)[-1] in PATH_LOADERS:
            path = _constant_text(call.args[1] if len(call.args) > 1 else call.args[0]) if call.args else None
            if path is None or not path.endswith(".py"):
                self._unknown(f"it loads a module from a path the source does not hold ({name})")
            else:
                yield from self.named_in_strings([path])
            return
        if name not in DYNAMIC_IMPORTS or not call.args:
            return
        argument = call.args[0]
        text = _constant_text(argument)
        if text is not None:
            yield from (self._parents_and_self(module.resolved(text)) if text.startswith(".") else
                        self.absolute(text, module, with_parents=True))
            return
        prefix = _constant_prefix(argument).strip(".")
        if not prefix and module.rel in self.launchers:
            return  # `python xla_spawn.py --num_cores 8 train.py`: what it imports is the command's next script
        if not prefix:
            self._unknown(f"it imports a module by a computed name ({name})")
            return
        self.maybe += [m for m in self.modules if (m.name.startswith(f"{prefix}.") or f".{prefix}." in f".{m.name}")
                       and not a_test(m.rel)]

    def _unknown(self, why: str) -> None:
        self.unknown = self.unknown or why

    def named_in_strings(self, strings: Iterable[str]) -> Iterator[Module]:
        """Modules a string names: "models.resnet.ResNet" (a registry, a config's class path), or a script of
        ours run by path ("eval.py", "scripts/eval.py")."""
        for text in strings:
            if text.endswith(".py"):
                yield from (m for m in self.modules if m.rel == text or m.rel.endswith(f"/{text}"))
            elif "." in text and all(part.isidentifier() for part in text.split(".")) and \
                    text.rsplit(".", 1)[1].lower() not in FILE_SUFFIXES:
                parts = text.split(".")
                for end in range(len(parts), 0, -1):
                    found = self.by_name.get(".".join(parts[:end]))
                    if found is not None:
                        yield from self._parents_and_self(found.name)
                        break


def _constant_text(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _constant_prefix(node: ast.expr) -> str:
    """The text a built name surely starts with: "models." of `"models." + name` or `f"models.{name}"`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _constant_prefix(node.left)
    if isinstance(node, ast.JoinedStr) and node.values:
        return _constant_text(node.values[0]) or ""  # type: ignore[arg-type]
    return _constant_text(node) or ""


def a_test(rel: str) -> bool:
    """`tests/...`, `test_x.py`, `x_test.py`, `conftest.py`: run by a test runner, not loaded by a training run."""
    path = PurePosixPath(rel)
    return "tests" in path.parts[:-1] or path.name.startswith("test_") or path.stem.endswith("_test") or \
        path.name == "conftest.py"
