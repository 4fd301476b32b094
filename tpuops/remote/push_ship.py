"""The worker side of a push as it is shipped: `shipped/push_agent.py` with its parts inlined, run by
`python3 -S -c` (workers have no tpuops, and need nothing beyond the standard library)."""

from __future__ import annotations

from tpuops.shipped import program

AGENT_SOURCE = program("push_agent")


def agent_command(*args: str) -> list[str]:
    # -S: the agent needs only the standard library, and skipping site-packages (and their .pth files) makes
    # each call start several times faster; a no-change push is mostly such calls.
    return ["python3", "-S", "-c", AGENT_SOURCE, *args]
