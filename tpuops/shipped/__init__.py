"""Programs tpuops sends as text to workers and to the guard VM, and runs there (never imported by tpuops to run
them here): the push agent (`push_agent.py` with its parts `push_protocol.py`, `push_receive.py`,
`push_relay.py`), the autostop agent (`autostop_agent.py` with its part `autostop_agent_host.py`), the guard VM's
bundle fetcher (`guard_fetch_bundle.py`), pull's reader (`pull_agent.py`), the worker's output shipper
(`output_shipper.py`), and the host scripts (`*.sh`, `tpu_metrics.py`). The three that act as the VM (the autostop
agent, the bundle fetcher, the output shipper) share the part `metadata_token.py`: the VM's own token.

Each program is standard-library only, Python 3.8 syntax, with no `from __future__` import: the hosts have no
tpuops. A program may be split into parts for reading: `from tpuops.shipped.PART import (...)` in `NAME.py` is
replaced by the text of `PART.py` when it is shipped (`program`); a part's own import of another part goes, since
the program carries that part's text already.

A host script is passed as `sh -c SCRIPT NAME ARGS...`, every argument quoted; it may use the functions of a
shared part (`run_scope.sh`: a run's processes), whose text then goes first.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

PART_IMPORT = re.compile(r"^from tpuops\.shipped\.(\w+) import \(.*?^\)\n", re.M | re.S)
PARTS = {"setup": ("run_scope",), "start": ("run_scope",), "stop": ("run_scope",),
         "watchdog_tools": ("py_spy",), "watchdog_capture": ("py_spy",)}


@cache
def program(name: str) -> str:
    """The text of `NAME.py` with its parts inlined, as sent to a host."""
    return PART_IMPORT.sub(lambda match: PART_IMPORT.sub("", script_text(f"{match.group(1)}.py")),
                           script_text(f"{name}.py"))


@cache
def script(name: str) -> str:
    return "".join(_text(part) for part in (*PARTS.get(name, ()), name))


def _text(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.sh").read_text()


@cache
def script_text(filename: str) -> str:
    """A host program as it is on disk (e.g. a Python reader passed as an argument)."""
    return resources.files(__name__).joinpath(filename).read_text()


def script_command(name: str, *args: str) -> list[str]:
    """An argv for Runner.run: the script's text runs under sh with `args` as $1, $2, ... (quoted)."""
    return ["sh", "-c", script(name), name, *args]
