"""Progress while resources come up and code goes out: a live view on a terminal, one line per step otherwise."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tpuops.cli.render import err_console


class ProgressView:
    """Each resource's latest state: a live table on a terminal, one line per change otherwise (stderr)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.rows: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()
        self.live: Any = None

    def update(self, kind: str, name: str, text: str) -> None:
        if not self.enabled:
            return
        with self.lock:
            self.rows[(kind, name)] = text
            if self.live is not None:
                self.live.update(self.table())
            else:
                err_console.print(f"  {kind} {name}: {text}", markup=False)

    def table(self) -> Any:  # rich Table (rich is imported lazily)
        from rich.table import Table

        table = Table(show_header=True, header_style="bold", box=None)
        for column in ("resource", "name", "state"):
            table.add_column(column)
        for (kind, name), text in self.rows.items():
            table.add_row(kind, name, text)
        return table

    def start(self) -> None:
        """Show the live table from now on (a terminal only; elsewhere every update is a line)."""
        if not (self.enabled and err_console.is_terminal) or self.live is not None:
            return
        from rich.live import Live

        self.live = Live(self.table(), console=err_console, refresh_per_second=8, transient=False)
        self.live.start()

    def stop(self) -> None:
        with self.lock:
            if self.live is not None:
                self.live.stop()
                self.live = None

    @contextmanager
    def shown(self) -> Iterator[ProgressView]:
        self.start()
        try:
            yield self
        finally:
            self.stop()
