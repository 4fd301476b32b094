"""Capture a hung run before it is stopped: on every worker at once, a `py-spy dump` of each trainer process
(or the fallback: state, kernel wait channel and stack, faulthandler where the trainer registered it), the last
lines of its output, and the probes with libtpu's metrics; written as one incident folder (see records.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from tpuops.remote.base import Runner
from tpuops.remote.fanout import run_each
from tpuops.shipped import script_command
from tpuops.watchdog.confirm import Probe

OUTPUT_LINES = 200
CAPTURE_TIMEOUT = 180.0
OUTPUT_MARK = "=== output"
STACKS_MARK = "=== stacks"
FRAMES_PER_THREAD = 3
# `--- pid P:` is ours (watchdog_capture.sh), `Process P:` py-spy's; `Thread TID (idle): "NAME"`, NAME optional
_PROCESS_HEADER = re.compile(r"^(?:--- pid (\d+):|Process (\d+):)")
_THREAD_HEADER = re.compile(r'^Thread (0[xX][0-9a-fA-F]+|\d+)\b(?:.*"(.*)")?')


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
    """Where a worker's trainer stands: the innermost frames of each process's main thread as py-spy showed
    them (process ids left out), or the wait channels of the fallback. Equal on workers waiting at the same place.

    The main thread is the one whose native id is the process id: py-spy names it "MainThread" only when the
    process imported `threading`, so a label would miss most trainers."""
    frames: list[str] = []
    process: _Process | None = None
    thread: _Thread | None = None  # the thread whose frames the indented lines are
    for line in stacks.splitlines():
        header = _PROCESS_HEADER.match(line)
        if header:
            pid = int(header.group(1) or header.group(2))
            if process is None or process.pid != pid:  # `--- pid P` then py-spy's own `Process P:`: one process
                frames += process.main_frames() if process else []
                process = _Process(pid)
        if line.startswith("    "):
            if thread is not None:
                thread.frames.append(line.strip())
            continue
        thread = _thread(line) if process is not None and line.startswith("Thread ") else None
        if thread is not None and process is not None:
            process.threads.append(thread)
        elif line.startswith("thread ") and " wchan " in line:
            frames.append(line.split(" wchan ", 1)[1])
    frames += process.main_frames() if process else []
    return "\n".join(frames)


@dataclass
class _Thread:
    id: int | None  # the native thread id (decimal in py-spy's dump), else py-spy's pthread id (hex)
    name: str | None
    frames: list[str] = field(default_factory=list)


@dataclass
class _Process:
    pid: int
    threads: list[_Thread] = field(default_factory=list)

    def main_frames(self) -> list[str]:
        """The main thread's innermost frames: its id is the pid; without native ids, the one py-spy calls
        MainThread, else the first it lists."""
        shown = [thread for thread in self.threads if thread.frames]
        main = next((t for t in shown if t.id == self.pid), None) \
            or next((t for t in shown if t.name == "MainThread"), None) or (shown[0] if shown else None)
        return main.frames[:FRAMES_PER_THREAD] if main else []


def _thread(line: str) -> _Thread:
    found = _THREAD_HEADER.match(line)
    if found is None:
        return _Thread(None, None)
    number = found.group(1)
    return _Thread(int(number, 16) if number[:2] in ("0x", "0X") else int(number), found.group(2))


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


def without_python_stacks(captures: Sequence[WorkerCapture]) -> str:
    """Why workers have no Python stacks, as the capture said it ("w0: py-spy is not installed here (its install
    failed: ...)"), one worker after the other; "" when py-spy dumped everywhere."""
    reasons = []
    for capture in captures:
        line = next((line for line in capture.stacks.splitlines() if PY_SPY_MISSING.search(line)), None)
        if line is not None:
            reasons.append(f"{capture.worker}: {line.removesuffix(': fallback')}")
    return "; ".join(reasons)
