"""Output helpers shared by the commands: one console, JSON, sizes."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from rich.console import Console
    from rich.table import Table

# Output that is not a terminal's (a pipe, a file, a CI log) is never cut to a width: `tpuops logs x | grep tag`
# must find the whole tag. Rich would use the terminal of stdin or stderr, or COLUMNS, or 80.
PIPE_WIDTH = 100_000


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

            stream = sys.stderr if self._stderr else sys.stdout
            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True,
                                    width=None if _is_terminal(stream) else PIPE_WIDTH)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)

    def __enter__(self) -> Console:
        return self.rich.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.rich.__exit__(*exc)


console: Console = LazyConsole()  # type: ignore[assignment]  (a Console to everyone who uses it)
err_console: Console = LazyConsole(stderr=True)  # type: ignore[assignment]


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced by something without isatty, or closed
        return False


def fit_table(build: Callable[[frozenset[str]], Table], target: Console, optional: Sequence[str] = ()) -> Table:
    """The table `build` makes (without the columns whose headers it is given), as `target` can show it without
    cutting a value: while it is wider than the terminal, the `optional` columns are left out, in that order;
    what is still too wide folds onto more lines, never ends in "…"."""
    from rich.measure import Measurement

    def too_wide(table: Table) -> bool:
        return Measurement.get(target, target.options.update_width(PIPE_WIDTH), table).maximum > target.width

    left_out: frozenset[str] = frozenset()
    table = build(left_out)
    for header in optional:
        if not too_wide(table):
            break
        left_out |= {header}
        table = build(left_out)
    folding = too_wide(table)
    for column in table.columns:
        column.overflow = "fold"
        column.no_wrap = column.no_wrap and not folding  # a column kept on one line would be cropped
    return table


def fitted_table(target: Console, headers: Sequence[str], rows: Sequence[Sequence[str]], *,
                 optional: Sequence[str] = (), right: Sequence[str] = (), one_line: Sequence[str] = (),
                 **options: Any) -> Table:
    """Rows of text under `headers` as fit_table fits them: `right` columns right-justified, `one_line` columns
    not wrapped (while the table fits), `options` for rich's Table."""
    from rich.table import Table

    def build(left_out: frozenset[str]) -> Table:
        table = Table(**options)
        kept = [index for index, header in enumerate(headers) if header not in left_out]
        for index in kept:
            header = headers[index]
            table.add_column(header, justify="right" if header in right else "left", no_wrap=header in one_line)
        for row in rows:
            table.add_row(*(row[index] for index in kept))
        return table

    return fit_table(build, target, optional)


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

