"""Host scripts tpuops runs on every worker (passed as `sh -c SCRIPT NAME ARGS...`, every argument quoted).

A script may use the functions of a shared part (`run_scope.sh`: a run's processes), whose text then goes first.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

PARTS = {"setup": ("run_scope",), "start": ("run_scope",), "stop": ("run_scope",),
         "watchdog_tools": ("py_spy",), "watchdog_capture": ("py_spy",)}


@cache
def script(name: str) -> str:
    return "".join(_text(part) for part in (*PARTS.get(name, ()), name))


def _text(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.sh").read_text()


@cache
def script_text(filename: str) -> str:
    """A host program that is not a shell script (e.g. a Python reader passed as an argument)."""
    return resources.files(__name__).joinpath(filename).read_text()


def script_command(name: str, *args: str) -> list[str]:
    """An argv for Runner.run: the script's text runs under sh with `args` as $1, $2, ... (quoted)."""
    return ["sh", "-c", script(name), name, *args]
