"""Capture a hung run before it is stopped: on every worker at once, a `py-spy dump` of each trainer process
(or the fallback: state, kernel wait channel and stack, faulthandler where the trainer registered it), the last
lines of its output, and the probes with libtpu's metrics; written as one incident folder (see records.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tpuops.remote.base import Runner
from tpuops.remote.fanout import run_each
from tpuops.shipped import script_command
from tpuops.watchdog.confirm import Probe

OUTPUT_LINES = 200
CAPTURE_TIMEOUT = 180.0
OUTPUT_MARK = "=== output"
STACKS_MARK = "=== stacks"
FRAMES_PER_THREAD = 3


@dataclass(frozen=True)
class WorkerCapture:
    worker: str
    stacks: str
    output: str
    error: str | None = None


def capture_all(runners: Sequence[Runner], cluster: str, run_id: str, max_parallel: int = 32) -> list[WorkerCapture]:
    argv = script_command("watchdog_capture", cluster, run_id, str(OUTPUT_LINES))
    results = run_each(runners, lambda r: r.run(argv, capture=True, timeout=CAPTURE_TIMEOUT), max_parallel)
    captures = []
    for result in results:
        text = result.stdout.decode("utf-8", "replace")
        stacks, _, output = text.partition(OUTPUT_MARK + "\n")
        captures.append(WorkerCapture(result.worker, stacks.removeprefix(STACKS_MARK + "\n"), output,
                                      None if result.ok else result.error or f"exit {result.exit_code}"))
    return captures


def stack_signature(stacks: str) -> str:
    """Where a worker's trainer stands: the innermost frames of each main thread py-spy showed (process ids
    left out), or the wait channels of the fallback. Equal on workers waiting at the same place."""
    frames: list[str] = []
    in_main = taken = 0
    for line in stacks.splitlines():
        if line.startswith("Thread "):
            in_main, taken = '"MainThread"' in line, 0
        elif in_main and line.startswith("    ") and taken < FRAMES_PER_THREAD:
            frames.append(line.strip())
            taken += 1
        elif line.startswith("thread ") and " wchan " in line:
            frames.append(line.split(" wchan ", 1)[1])
    return "\n".join(frames)


def incident_files(captures: Sequence[WorkerCapture], first: Sequence[Probe],
                   second: Sequence[Probe]) -> dict[str, str]:
    """Each worker's files of the incident folder."""
    files: dict[str, str] = {}
    for capture in captures:
        stacks = capture.stacks if capture.error is None else f"{capture.error}\n{capture.stacks}"
        files[f"{capture.worker}/stacks.txt"] = stacks
        files[f"{capture.worker}/output.txt"] = capture.output
    for label, probes in (("first probe", first), ("second probe", second)):
        for probe in probes:
            name = f"{probe.worker}/metrics.txt"
            files[name] = files.get(name, "") + f"# {label}\n{probe.text.rstrip()}\n"
    return files


PY_SPY_MISSING = re.compile(r"py-spy is not installed here|py-spy could not attach")


def used_fallback(captures: Sequence[WorkerCapture]) -> bool:
    return any(PY_SPY_MISSING.search(c.stacks) for c in captures)
