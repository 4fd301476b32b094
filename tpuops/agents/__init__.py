"""Programs tpuops ships to workers as text and runs there (never imported by tpuops itself).

An agent may be split into parts for reading: `from tpuops.agents.PART import (...)` in `agents/NAME.py` is
replaced by the text of `agents/PART.py` when the agent is shipped, so each part stays standard-library only,
Python 3.8 syntax, with no `from __future__` import.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

PART_IMPORT = re.compile(r"^from tpuops\.agents\.(\w+) import \(.*?^\)\n", re.M | re.S)


@cache
def agent_source(name: str) -> str:
    """The text of `agents/NAME.py` with its parts inlined, as sent to a worker."""
    return PART_IMPORT.sub(lambda match: _read(match.group(1)), _read(name))


def _read(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.py").read_text()
