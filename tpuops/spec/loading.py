"""Reading a spec: YAML in, a `Spec` out, and every error as one line naming the file, the line and the field
(`spec.yaml:12: tpu.type: ...`), with the keys a misspelt one may have meant."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from tpuops import spec_yaml
from tpuops.durations import WRITTEN_BY_USER
from tpuops.errors import SpecError
from tpuops.spec.model import Spec


def load_spec(path: str | Path) -> Spec:
    """Read, parse and validate a spec file's shape; SpecError names file:line:field.

    The catalog rules (rules.py) are applied by `ops.specs.load_checked`, for the commands that create."""
    return load_spec_with_lines(path)[0]


def load_spec_with_lines(path: str | Path) -> tuple[Spec, LineIndex]:
    path = Path(path)
    return parse_spec(read_spec_text(path), str(path))


def read_spec_text(path: Path) -> str:
    """The spec file's text; a missing file, a directory, an unreadable or binary file each get their own line."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file {path} not found", "create one with `tpuops init` or check the path") from None
    except IsADirectoryError:
        raise SpecError(f"{path} is a directory, not a spec file",
                        f"give the YAML file inside it, e.g. {path / 'tpuops.yaml'}") from None
    except PermissionError:
        raise SpecError(f"spec file {path} cannot be read with your permissions", "check its owner and mode") from None
    except UnicodeDecodeError as err:
        raise SpecError(f"spec file {path} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset "
                        f"{err.start})", "a spec is a YAML text file: is this the right file?") from None


def parse_spec(text: str, source: str = "<spec>") -> tuple[Spec, LineIndex]:
    """YAML text -> Spec, with errors naming source, line and field."""
    node, data = spec_yaml.compose(text, source)
    lines = LineIndex(node)
    if not isinstance(data, dict):
        raise SpecError(
            "the spec must be a YAML mapping (name: ..., zone: ..., tpu: ...)",
            "start from `tpuops init`",
            path=source,
            line=1,
        )
    try:
        return Spec.model_validate(data, context={WRITTEN_BY_USER: True}), lines
    except ValidationError as err:
        raise _spec_error(err, source, lines) from None


def _spec_error(err: ValidationError, source: str, lines: LineIndex) -> SpecError:
    first = err.errors()[0]
    loc = tuple(part for part in first["loc"] if not str(part).startswith("function-after"))
    field = ".".join(str(part) for part in loc) or None
    line = lines.line_of(loc)
    kind = first["type"]
    if kind == "extra_forbidden":
        *parent, key = loc
        known = _known_keys(tuple(parent))
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys here: {', '.join(sorted(known))}"
        return SpecError(f"unknown key '{key}'", hint, path=source, line=line, field=field)
    if kind == "missing":
        return SpecError("required key is missing", "see `tpuops schema`", path=source, line=line, field=field)
    if kind in _TYPE_WORDS:
        return _wrong_type(kind, first["input"], lines.text_of(loc), loc, source, line, field)
    message = first["msg"].removeprefix("Value error, ")
    if kind == "literal_error":
        message = f"{message}, got {first['input']!r}"
    return SpecError(message, path=source, line=line, field=field)


_TYPE_WORDS = {"bool_type": "a boolean (true or false)", "int_type": "a whole number", "float_type": "a number",
               "string_type": "text"}


def _wrong_type(kind: str, given: Any, raw: str | None, loc: tuple[Any, ...], source: str, line: int | None,
                field: str | None) -> SpecError:
    """`slices: yes`, `port: true`, `preemptible: 1`, `runtime: 1.10`: what YAML read, and how to write it."""
    shown = repr(given) if isinstance(given, str) or raw is None else raw
    read_as = {bool: "a boolean", int: "a number", float: "a number", str: "text"}.get(type(given))
    crossed = isinstance(given, bool) or kind == "string_type" or isinstance(given, str)
    message = f"expected {_TYPE_WORDS[kind]}, got {shown}" + (f" (YAML reads it as {read_as})" if crossed else "")
    if kind == "string_type" and isinstance(given, (bool, int, float)):
        written = f"{loc[-1]}: '{shown}'" if loc and isinstance(loc[-1], str) else f"'{shown}'"  # a list item: no key
        hint = f"quote it to keep it as written: {written}"
    elif kind == "bool_type":
        hint = "write true or false"
    elif isinstance(given, bool):
        hint = "true, yes and on are booleans in YAML, not numbers: write the number"
    elif isinstance(given, str):
        hint = "write the number without quotes"
    else:
        hint = "write a whole number" if kind == "int_type" else None
    return SpecError(message, hint, path=source, line=line, field=field)


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = Spec
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(str(part))
        if info is None:
            break
        inner = _model_in(info.annotation)
        if inner is None:
            break
        model = inner
    return [info.alias or name for name, info in model.model_fields.items()]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found:
            return found
    return None


class LineIndex:
    """Maps a field path (('tpu', 'type')) to its 1-based line in the YAML text."""

    def __init__(self, root: yaml.Node | None) -> None:
        self.root = root

    def line_of(self, loc: tuple[Any, ...]) -> int | None:
        return self._walk(loc)[1]

    def text_of(self, loc: tuple[Any, ...]) -> str | None:
        """The scalar at `loc` as written in the file (`1.10`, not the 1.1 YAML made of it)."""
        node, _ = self._walk(loc)
        return node.value if isinstance(node, yaml.ScalarNode) else None

    def _walk(self, loc: tuple[Any, ...]) -> tuple[yaml.Node | None, int | None]:
        node, line = self.root, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if key.value == str(part):
                        node, line = value, key.start_mark.line + 1
                        break
                else:
                    return None, line or (node.start_mark.line + 1)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return None, line
        return node, line
