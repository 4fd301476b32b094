"""Programs tpuops ships to workers as text and runs there (never imported by tpuops itself)."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def agent_source(name: str) -> str:
    """The text of `agents/NAME.py`, as sent to a worker."""
    return resources.files(__name__).joinpath(f"{name}.py").read_text()
