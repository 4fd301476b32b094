"""How streaming commands end on Ctrl-C or a closed stdout: one line (or none), the exit code shells expect.

Ctrl-C: the command says what still runs and how to stop it, and exits 130 (128 + SIGINT). A closed stdout
(`tpuops exec NAME -- seq 1 100000 | head -1`): nothing is printed and the exit code is 141 (128 + SIGPIPE),
what `seq` itself would report. Never a traceback.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import typer

from tpuops.remote.base import OutputClosed

INTERRUPTED_EXIT = 130
PIPE_CLOSED_EXIT = 141


@contextmanager
def ends_cleanly(on_interrupt: Callable[[KeyboardInterrupt], str]) -> Iterator[None]:
    """Turn Ctrl-C into `tpuops: MESSAGE` and exit 130, a closed stdout into a quiet exit 141."""
    try:
        yield
    except KeyboardInterrupt as interrupt:
        try:
            message = on_interrupt(interrupt)
            print(f"\ntpuops: {message}", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C while we explain: just leave
        leave(INTERRUPTED_EXIT)
    except (OutputClosed, BrokenPipeError):
        silence_stdout()
        leave(PIPE_CLOSED_EXIT)


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed pipe cannot complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def leave(code: int) -> None:
    """Exit with `code`. Threads that are not daemons (a cloud call in flight) would make the interpreter wait
    for them at exit, where a further Ctrl-C prints a traceback from `threading`: then leave at once."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    raise typer.Exit(code)


def up_interrupted(interrupt: KeyboardInterrupt) -> str:
    """What Ctrl-C during `up` leaves behind (ops.up.UpInterrupted): state is saved before every create."""
    resume = "what was started is recorded; run `tpuops up` again to resume, or `tpuops down` to delete it"
    withdrawn = getattr(interrupt, "withdrawn", None)
    left_behind = getattr(interrupt, "left_behind", None)
    if left_behind:
        return f"interrupted: {left_behind}; {resume}"
    if withdrawn:
        return f"interrupted: withdrew {withdrawn}, which was still waiting for capacity; {resume}"
    return f"interrupted: {resume}"
