"""Lint the trainer's source: every `.py` file `push` would send (code.exclude and .tpuopsignore honoured),
parsed with `ast`, no framework imported. `# tpuops: ignore[XLA003]` on a line silences that rule there.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuops.check.findings import Finding
from tpuops.check.lint_rules import module_hits
from tpuops.remote.manifest import scan_tree

IGNORE_RE = re.compile(r"#\s*tpuops:\s*ignore\[([A-Za-z0-9_,\s-]+)\]")


@dataclass(frozen=True)
class LintResult:
    findings: tuple[Finding, ...]
    files: int
    ignored: int
    functions: Mapping[str, tuple[str, int]]  # every function the code defines -> (file, line) of its def


def python_files(root: Path, exclude: Sequence[str]) -> list[str]:
    """The `.py` files of the code directory that `push` would send, relative to it."""
    if root.is_file():
        return [root.name] if root.suffix == ".py" else []
    return [entry.path for entry in scan_tree(root, exclude).entries if entry.path.endswith(".py") and not entry.link]


def lint_tree(root: Path, exclude: Sequence[str] = (), legacy_node: bool = False) -> LintResult:
    base = root.parent if root.is_file() else root
    findings: list[Finding] = []
    ignored = 0
    functions: dict[str, tuple[str, int]] = {}
    files = python_files(root, exclude)
    for rel in files:
        source = (base / rel).read_text(errors="replace")
        try:
            tree = ast.parse(source, filename=rel)
        except SyntaxError as err:
            findings.append(Finding("XLA000", "syntax", f"cannot parse: {err.msg}", "fix the syntax error",
                                    rel, err.lineno))
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.setdefault(node.name, (rel, node.lineno))
        file_findings, file_ignored = lint_module(tree, source, rel, legacy_node)
        findings += file_findings
        ignored += file_ignored
    return LintResult(tuple(findings), len(files), ignored, functions)


def lint_module(tree: ast.Module, source: str, rel: str, legacy_node: bool = False) -> tuple[list[Finding], int]:
    lines = source.splitlines()
    found: dict[tuple[str, int, str], Finding] = {}
    ignored: set[tuple[str, int, str]] = set()
    for rule, node, message in module_hits(tree, legacy_node):
        line = getattr(node, "lineno", 0)
        key = (rule.id, line, message)
        if rule.id in _ignored_rules(lines, line):
            ignored.add(key)
        elif key not in found:
            found[key] = Finding(rule.id, rule.name, message, rule.hint, rel, line)
    return sorted(found.values(), key=lambda f: (f.line or 0, f.rule)), len(ignored)


def _ignored_rules(lines: list[str], line: int) -> set[str]:
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    match = IGNORE_RE.search(text)
    return {part.strip().upper() for part in match.group(1).split(",")} if match else set()
