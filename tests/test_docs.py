"""The documentation stays true: every command and option in docs/commands.md, every spec key in docs/spec.md,
every relative link of the README, CONTRIBUTING.md and docs/ resolving to a file and a heading.

Fast and offline: it walks the Typer app and the pydantic models, and reads Markdown.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel

from tpuops.cli.main import app
from tpuops.spec import Spec

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
COMMANDS_PAGE = DOCS / "commands.md"
SPEC_PAGE = DOCS / "spec.md"
LINKED_PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`([^`]*)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
TABLE_FIRST_CELL = re.compile(r"^\|\s*((?:[^|\\]|\\.)*?)\s*\|")  # a \| inside a cell is not its end


# ------------------------------------------------------------------------------------------- Markdown


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, heading text) of every heading outside code blocks."""
    found = []
    for number, line in prose_lines(text):
        match = HEADING.match(line)
        if match:
            found.append((number - 1, len(match.group(1)), match.group(2)))
    return found


def sections(text: str) -> Iterator[tuple[str, str]]:
    """(heading text, its section: up to the next heading of the same or a higher level)."""
    lines = text.splitlines()
    found = headings(text)
    for position, (index, level, title) in enumerate(found):
        end = next((later for later, later_level, _ in found[position + 1:] if later_level <= level), len(lines))
        yield title, "\n".join(lines[index:end])


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for _, _, title in headings(text):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


# ------------------------------------------------------------------------------------------- commands


def commands() -> Iterator[tuple[str, Any]]:
    """("tpuops guard up", click command) for the root and every visible command and subcommand."""
    def walk(command: Any, path: str) -> Iterator[tuple[str, Any]]:
        yield path, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not getattr(sub, "hidden", False):
                yield from walk(sub, f"{path} {name}")
    yield from walk(typer.main.get_command(app), "tpuops")


def options_of(command: Any) -> list[str]:
    return [name for param in command.params
            if param.param_type_name == "option" and not getattr(param, "hidden", False)
            for name in [*param.opts, *param.secondary_opts]]


def command_sections(page: str) -> dict[str, str]:
    """Each section whose heading's first code span names a command: {"tpuops guard up": section text}."""
    found = {}
    for title, body in sections(page):
        spans = CODE_SPAN.findall(title)
        if spans and (spans[0] == "tpuops" or spans[0].startswith("tpuops ")):
            found[spans[0]] = body
    return found


def option_rows(section: str) -> set[str]:
    """The options named in the first cell of the table rows of a command's own section (not its subsections):
    `| `--worker WORKERS`, `-w` | ... |` documents --worker and -w."""
    subsections = [index for index, _, _ in headings(section) if index > 0]
    own = "\n".join(section.splitlines()[:min(subsections, default=None)])
    cells = [cell.group(1) for _, line in prose_lines(own) if (cell := TABLE_FIRST_CELL.match(line))]
    return {option for cell in cells for option in re.findall(r"`(--?[A-Za-z][-\w]*)", cell)}


def undocumented_commands(page: str) -> list[str]:
    """Commands without a section, options without a row in their command's table, and sections or rows of
    commands and options that no longer exist."""
    documented = command_sections(page)
    real = dict(commands())
    problems = []
    for path, command in real.items():
        if path not in documented:
            problems.append(f"{path}: no section")
            continue
        rows = option_rows(documented[path])
        options = options_of(command)
        problems += [f"{path}: {option} not documented" for option in options if option not in rows]
        problems += [f"{path}: {option} documented, but not an option" for option in sorted(rows - set(options))]
    problems += [f"{path}: documented, but there is no such command" for path in documented if path not in real]
    return problems


def test_every_command_and_option_is_in_docs_commands() -> None:
    assert undocumented_commands(COMMANDS_PAGE.read_text()) == []


def test_a_missing_option_or_command_is_found() -> None:
    page = COMMANDS_PAGE.read_text()
    without_print = "\n".join(line for line in page.splitlines() if not line.startswith("| `--print`"))
    assert undocumented_commands(without_print) == ["tpuops ssh: --print not documented"]
    without_schema = page.replace("## `tpuops schema`", "## The schema command")
    assert undocumented_commands(without_schema) == ["tpuops schema: no section"]
    stale = page.replace("| `--print` |", "| `--print` |\n| `--printed` | gone |")
    assert undocumented_commands(stale) == ["tpuops ssh: --printed documented, but not an option"]


def test_the_walk_sees_subcommands_and_root_options() -> None:
    found = dict(commands())
    assert {"tpuops", "tpuops init", "tpuops guard up", "tpuops simulate preempt"} <= set(found)
    assert "--version" in options_of(found["tpuops"]) and "--no-guard" in options_of(found["tpuops up"])


# ------------------------------------------------------------------------------------------- spec keys


def models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for argument in typing.get_args(annotation):
        yield from models_in(argument)


def spec_keys(model: type[BaseModel] = Spec, prefix: str = "") -> Iterator[str]:
    """Every key a spec may hold, dotted as the docs write them: tpu.type, data[].from, guard.notify."""
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        yield key
        inner = "[]." if typing.get_origin(field.annotation) is list else "."
        for section in models_in(field.annotation):
            yield from spec_keys(section, key + inner)


def undocumented_keys(page: str) -> list[str]:
    """Keys with neither a table row (first cell `key`) nor a heading naming them (## `tpu`), and rows naming keys
    that no longer exist."""
    keys = list(spec_keys())
    cells = [cell.group(1) for _, line in prose_lines(page) if (cell := TABLE_FIRST_CELL.match(line))]
    rows = [match.group(1) for cell in cells if (match := re.fullmatch(r"`([a-z_]+(?:(?:\[\])?\.[a-z_]+)*)`", cell))]
    titled = {span for _, _, title in headings(page) for span in CODE_SPAN.findall(title)}
    missing = [f"{key}: not documented" for key in keys if key not in rows and key not in titled]
    return missing + [f"{key}: documented, but not a spec key" for key in rows if key not in keys]


def test_every_spec_key_is_in_docs_spec() -> None:
    assert undocumented_keys(SPEC_PAGE.read_text()) == []


def test_a_missing_or_stale_spec_key_is_found() -> None:
    page = SPEC_PAGE.read_text()
    without_port = "\n".join(line for line in page.splitlines() if "`ssh.port`" not in line)
    assert undocumented_keys(without_port) == ["ssh.port: not documented"]
    stale = page.replace("| `ssh.port` |", "| `ssh.host` | gone |\n| `ssh.port` |")
    assert undocumented_keys(stale) == ["ssh.host: documented, but not a spec key"]


def test_the_key_walk_reaches_nested_sections() -> None:
    keys = set(spec_keys())
    assert {"name", "tpu.type", "data[].from", "autostop.idle", "watch.hang_after", "guard.notify"} <= keys
    assert len(keys) == len(list(spec_keys())) >= 55


# ------------------------------------------------------------------------------------------- links


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for number, line in prose_lines(page.read_text()):
        for target in LINK.findall(CODE_SPAN.sub("code", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ... are not checked offline
                continue
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not linked.exists():
                problems.append(f"{where}: no such file")
            elif anchor and (linked.is_dir() or anchor not in anchors(linked.read_text())):
                problems.append(f"{where}: no heading #{anchor}")
    return problems


def test_every_relative_link_resolves() -> None:
    assert len(LINKED_PAGES) >= 10
    problems = [problem for page in LINKED_PAGES for problem in broken_links(page)]
    assert problems == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## `tpuops up`: the part\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#tpuops-up-the-part) [file](missing.md) [anchor](other.md#nope)\n"
                    "```\n[in a code block](missing.md)\n```\n[web](https://example.com/x) [self](#nothing)\n")
    assert broken_links(page, root=tmp_path) == [
        "page.md:1: missing.md: no such file", "page.md:1: other.md#nope: no heading #nope",
        "page.md:5: #nothing: no heading #nothing"]
