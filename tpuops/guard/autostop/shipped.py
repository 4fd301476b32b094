"""Programs tpuops ships to workers as text and runs there (never imported by tpuops itself): the autostop agent.

An agent may be split into parts for reading: `from tpuops.guard.autostop.PART import (...)` in `NAME.py` here
is replaced by the text of `PART.py` when the agent is shipped, so each part stays standard-library only,
Python 3.8 syntax, with no `from __future__` import.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

PACKAGE = "tpuops.guard.autostop"
PART_IMPORT = re.compile(r"^from tpuops\.guard\.autostop\.(\w+) import \(.*?^\)\n", re.M | re.S)


@cache
def agent_source(name: str) -> str:
    """The text of `guard/autostop/NAME.py` with its parts inlined, as sent to a worker."""
    return PART_IMPORT.sub(lambda match: _read(match.group(1)), _read(name))


def _read(name: str) -> str:
    return resources.files(PACKAGE).joinpath(f"{name}.py").read_text()
