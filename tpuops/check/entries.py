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
from pathlib import Path, PurePosixPath

OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "\n"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
MAX_SCRIPT_DEPTH = 3  # a script calling a script calling a script: further is a loop or not a trainer


def entry_scripts(command: str, code_root: Path) -> tuple[str, ...]:
    """The `.py` files of `code_root` (relative, POSIX) that `command` runs, in order, each once."""
    found: dict[str, None] = {}
    _scan(command, code_root, PurePosixPath("."), found, 0)
    return tuple(found)


def _scan(command: str, root: Path, cwd: PurePosixPath, found: dict[str, None], depth: int) -> None:
    for words in _simple_commands(command):
        cwd = _follow(words, root, cwd, found, depth)


def _simple_commands(command: str) -> list[list[str]]:
    """The command split at `&&`, `;`, `|` and new lines into its simple commands' words (quotes removed)."""
    lexer = shlex.shlex(command.replace("\\\n", " "), posix=True, punctuation_chars=";&|()\n")
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


def _follow(words: list[str], root: Path, cwd: PurePosixPath, found: dict[str, None], depth: int) -> PurePosixPath:
    """Records the scripts one simple command runs; returns the directory the next command runs in."""
    while words and ASSIGNMENT.match(words[0]):  # FOO=1 python train.py
        words = words[1:]
    if not words:
        return cwd
    if words[0] == "cd":
        return _changed_dir(words[1:], root, cwd)
    for index, word in enumerate(words):
        if word == "-c" and index + 1 < len(words):  # python -c "from trainer import main; main()"
            for name in _imported_names(words[index + 1]):
                if (script := _module_file(name, root, cwd) or _package_file(name, root, cwd)) is not None:
                    found.setdefault(script, None)
            continue
        if word in {"-m", "--module"} and index + 1 < len(words):
            script = _module_file(words[index + 1], root, cwd)
        elif word.endswith(".py"):
            script = _file(word, root, cwd)
        elif word.endswith(".sh"):  # bash scripts/train.sh, ./run.sh, nohup sh -x run.sh
            _run_shell_script(word, root, cwd, found, depth)
            continue
        else:
            continue
        if script is not None:
            found.setdefault(script, None)
    return cwd


def _changed_dir(arguments: list[str], root: Path, cwd: PurePosixPath) -> PurePosixPath:
    """Where `cd DIR` goes, relative to the code directory (`..` when it leaves it: `cd .. && python pkg/train.py`
    comes back in)."""
    if not arguments or "$" in arguments[0] or arguments[0].startswith(("/", "~")):
        return cwd  # `cd "$(dirname "$0")"`, `cd ~`: where it goes cannot be told; the scripts are looked up here
    moved = _relative(root, cwd / arguments[0])
    return moved if (root / moved).is_dir() else cwd


def _run_shell_script(word: str, root: Path, cwd: PurePosixPath, found: dict[str, None], depth: int) -> None:
    script = _file(word, root, cwd)
    if script is None or depth >= MAX_SCRIPT_DEPTH:
        return
    try:
        text = (root / script).read_text(errors="replace")
    except OSError:
        return
    _scan(text, root, cwd, found, depth + 1)


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
