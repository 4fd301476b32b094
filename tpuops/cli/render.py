"""Output helpers shared by the commands: one console, JSON, sizes."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rich.console import Console


class LazyConsole:
    """A rich Console made on first use: importing rich costs ~20 ms, which `tpuops --help` (and every command
    that prints no table) need not pay. Behaves as the Console it wraps, also as a context manager."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    @property
    def rich(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)

    def __enter__(self) -> Console:
        return self.rich.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.rich.__exit__(*exc)


console: Console = LazyConsole()  # type: ignore[assignment]  (a Console to everyone who uses it)
err_console: Console = LazyConsole(stderr=True)  # type: ignore[assignment]


@runtime_checkable
class Reportable(Protocol):
    """A result of an ops workflow: it says what it is as plain data."""

    def as_dict(self) -> dict[str, object]: ...


def plain(data: Any) -> Any:
    """Results (and lists of them) as plain data; plain data as it is."""
    if isinstance(data, Reportable):
        return data.as_dict()
    if isinstance(data, (list, tuple)):
        return [plain(item) for item in data]
    return data


def print_json(data: Any) -> None:
    """Every --json document: one indented JSON value on stdout, results rendered by their `as_dict()`."""
    sys.stdout.write(json.dumps(plain(data), indent=2, default=str) + "\n")


def print_json_line(data: Any) -> None:
    """One JSON value per line (streams: `logs -f --json`)."""
    sys.stdout.write(json.dumps(plain(data), default=str) + "\n")
    sys.stdout.flush()


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """'1 file', '2 files'."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"


def size_text(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"
