"""The worker side of a push as it is shipped: `push_agent.py` with its parts inlined, run by `python3 -S -c`
(workers have no tpuops, and need nothing beyond the standard library)."""

from __future__ import annotations

import re
from pathlib import Path

AGENT_PART = re.compile(r"^from tpuops\.remote\.(push_protocol|push_receive|push_relay) import \(.*?^\)\n",
                        re.M | re.S)


def agent_source() -> str:
    """push_agent.py as shipped: the text of its parts (push_protocol.py, push_receive.py, push_relay.py) in
    place of their imports, since workers have no tpuops. A part's own import of a part the agent carries
    already goes."""
    here = Path(__file__).parent

    def part(match: re.Match[str]) -> str:
        return AGENT_PART.sub("", (here / f"{match.group(1)}.py").read_text())

    return AGENT_PART.sub(part, (here / "push_agent.py").read_text())


AGENT_SOURCE = agent_source()


def agent_command(*args: str) -> list[str]:
    # -S: the agent needs only the standard library, and skipping site-packages (and their .pth files) makes
    # each call start several times faster; a no-change push is mostly such calls.
    return ["python3", "-S", "-c", AGENT_SOURCE, *args]
