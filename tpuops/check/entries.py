"""Which of the code directory's scripts a trainer's command runs: `python train.py`, `python -m pkg.train`,
`accelerate launch train.py`, `torchrun --nproc_per_node 8 train.py`, `cd src && python main.py`,
`bash scripts/train_tpu.sh` (its lines read in turn), the modules `python -c "from trainer import main; main()"`
imports. The lint starts from them and reads only the code they import, as the trainer would run it. Nothing is
executed; a command whose scripts cannot be told (an installed console script) names none, and the caller lints
every file.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "\n"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
OVERRIDE = re.compile(r"^[A-Za-z_][\w.]*=\S")  # Hydra's trainer.precision=bf16
MAX_SCRIPT_DEPTH = 3  # a script calling a script calling a script: further is a loop or not a trainer
WORDS = "<words>"  # the options' key for the words a command passes its script bare (`python main.py train`)


@dataclass(frozen=True)
class CommandRead:
    scripts: tuple[str, ...]  # the `.py` files of the code directory it runs, in order, each once
    options: Mapping[str, frozenset[object]]  # what it passes them: `--fp16` -> {True}, `--padding=longest`


def read_command(command: str, code_root: Path) -> CommandRead:
    """The `.py` files of `code_root` (relative, POSIX) that `command` runs, and the options it passes them."""
    reader = _Reader(code_root)
    reader.scan(command, PurePosixPath("."), 0)
    return CommandRead(tuple(reader.scripts), {name: frozenset(v) for name, v in reader.options.items()})


@dataclass
class _Reader:
    root: Path
    scripts: dict[str, None] = field(default_factory=dict)
    options: dict[str, set[object]] = field(default_factory=dict)

    def scan(self, command: str, cwd: PurePosixPath, depth: int) -> None:
        for words in _simple_commands(command):
            cwd = self.follow(words, cwd, depth)

    def follow(self, words: list[str], cwd: PurePosixPath, depth: int) -> PurePosixPath:
        """Records the scripts one simple command runs and the options it gives them; returns the directory the
        next command runs in."""
        while words and ASSIGNMENT.match(words[0]):  # FOO=1 python train.py
            words = words[1:]
        if not words:
            return cwd
        if words[0] == "cd":
            return _changed_dir(words[1:], self.root, cwd)
        for index, word in enumerate(words):
            if word == "-c" and index + 1 < len(words):  # python -c "from trainer import main; main()"
                names = _imported_names(words[index + 1])
                scripts = [_module_file(n, self.root, cwd) or _package_file(n, self.root, cwd) for n in names]
            elif word in {"-m", "--module"} and index + 1 < len(words):
                scripts = [_module_file(words[index + 1], self.root, cwd)]
            elif word.endswith(".py"):
                scripts = [_file(word, self.root, cwd)]
            elif word.endswith(".sh"):  # bash scripts/train.sh, ./run.sh, nohup sh -x run.sh
                self.run_shell_script(word, cwd, depth)
                continue
            else:
                continue
            found = [script for script in scripts if script is not None]
            self.scripts.update(dict.fromkeys(found))
            if found:  # `python launch.py --cores 8 train.py --fp16`: each script's options, the next's too
                self.read_options(words[index + 1:])
        return cwd

    def read_options(self, words: list[str]) -> None:
        """`--fp16`, `--padding max_length`, `--use_tpu=True`, `trainer.precision=bf16` (Hydra): by the name
        the code reads them as (`args.padding`, `FLAGS.use_tpu`, `cfg.trainer.precision`'s last part), and the
        bare words under WORDS (a subcommand: `python main.py train`)."""
        taken = -1  # the index of the word an option took as its value
        for index, word in enumerate(words):
            if word.startswith("--") and len(word) > 2:
                name, equals, value = word[2:].partition("=")
                if not equals:
                    following = words[index + 1] if index + 1 < len(words) else ""
                    value = following if following and not following.startswith("-") else "true"
                    taken = index + 1 if value == following else taken
            elif OVERRIDE.match(word):
                name, _, value = word.partition("=")
                name = name.rsplit(".", 1)[-1]
            elif word.startswith("-"):  # `-c x`: a short option's value, if it takes one, is the next word
                taken = index + 1
                continue
            elif index != taken:
                name, value = WORDS, word
            else:
                continue
            self.options.setdefault(name.replace("-", "_"), set()).add(value if name == WORDS else _typed(value))

    def run_shell_script(self, word: str, cwd: PurePosixPath, depth: int) -> None:
        script = _file(word, self.root, cwd)
        if script is None or depth >= MAX_SCRIPT_DEPTH:
            return
        try:
            text = (self.root / script).read_text(errors="replace")
        except OSError:
            return
        self.scan(text, cwd, depth + 1)


def _typed(value: str) -> object:
    """A command-line word as the value the code compares it with: True/False, a number, or the text."""
    if value.lower() in {"true", "false"}:
        return value.lower() == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _simple_commands(command: str) -> list[list[str]]:
    """The command split at `&&`, `;`, `|` and new lines into its simple commands' words (quotes removed)."""
    lines = [line for line in command.split("\n") if not line.lstrip().startswith("#")]  # a comment never goes on
    lexer = shlex.shlex("\n".join(lines).replace("\\\n", " "), posix=True, punctuation_chars=";&|()\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token in OPERATORS or set(token) <= set(";&|()\n"):
                commands.append([])
            else:
                commands[-1].append(token)
    except ValueError:  # an unclosed quote: what came before it is still read
        pass
    return [words for words in commands if words]


def _changed_dir(arguments: list[str], root: Path, cwd: PurePosixPath) -> PurePosixPath:
    """Where `cd DIR` goes, relative to the code directory (`..` when it leaves it: `cd .. && python pkg/train.py`
    comes back in)."""
    if not arguments or "$" in arguments[0] or arguments[0].startswith(("/", "~")):
        return cwd  # `cd "$(dirname "$0")"`, `cd ~`: where it goes cannot be told; the scripts are looked up here
    moved = _relative(root, cwd / arguments[0])
    return moved if (root / moved).is_dir() else cwd


def _file(word: str, root: Path, cwd: PurePosixPath) -> str | None:
    """`word` as a file of the code directory, looked up from the command's directory, then from the top."""
    if "$" in word or word.startswith(("/", "~")):
        return None
    for base in dict.fromkeys((cwd, PurePosixPath("."))):
        path = _relative(root, base / word)
        if path.parts[:1] != ("..",) and (root / path).is_file():
            return str(path)
    return None


def _module_file(name: str, root: Path, cwd: PurePosixPath) -> str | None:
    """`python -m pkg.train`: pkg/train.py, or pkg/train/__main__.py for a package."""
    if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
        return None
    path = name.replace(".", "/")
    return _file(f"{path}.py", root, cwd) or _file(f"{path}/__main__.py", root, cwd)


def _package_file(name: str, root: Path, cwd: PurePosixPath) -> str | None:
    return _file(f"{name.replace('.', '/')}/__init__.py", root, cwd) if re.fullmatch(r"[A-Za-z_][\w.]*", name) \
        else None


def _imported_names(code: str) -> list[str]:
    """The modules a `python -c` program imports: they are its scripts."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    return names + [node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level]


def _relative(root: Path, path: PurePosixPath) -> PurePosixPath:
    """`path` (relative to the code directory, `..` allowed) in its shortest form: `../code/a/./b` -> `a/b`."""
    top = root.resolve()
    return PurePosixPath(os.path.relpath(os.path.normpath(top / path), top))
