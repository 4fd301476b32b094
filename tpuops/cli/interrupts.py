"""How streaming commands end on Ctrl-C or a closed stdout: one line (or none), the exit code shells expect.

Ctrl-C: the command says what still runs and how to stop it, and exits 130 (128 + SIGINT). SIGTERM (`kill`,
`timeout`) and SIGHUP (a closed terminal, a dropped ssh session) are the same interruption with the same cleanup
(`run --down` tears down on all three); the exit code names the signal: 143, 129. A closed stdout
(`tpuops exec NAME -- seq 1 100000 | head -1`): nothing is printed and the exit code is 141 (128 + SIGPIPE),
what `seq` itself would report. Never a traceback.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType

import typer

from tpuops.remote.base import OutputClosed

PIPE_CLOSED_EXIT = 141
INTERRUPTING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[signal.Signals] = []  # which of them interrupted the command, for its exit code


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM and SIGHUP raise KeyboardInterrupt as Ctrl-C does, so every command gets
    the cleanup it has for Ctrl-C (a killed terminal must not leave a TPU billing). Restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in INTERRUPTING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    _received.append(signal.Signals(signum))
    if signum == signal.SIGHUP:
        _leave_dead_terminal()
    raise KeyboardInterrupt


def _leave_dead_terminal() -> None:
    """After a hang-up the terminal is gone and writing to it fails (EIO): a message must never stop a
    teardown, so output meant for the terminal goes nowhere. Pipes and files keep theirs."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            if stream.isatty():
                stream.flush()
                os.dup2(devnull, stream.fileno())
    os.close(devnull)


def interrupted_exit() -> int:
    """128 + the signal that interrupted the command: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + (_received[-1] if _received else signal.SIGINT)


def was_signalled() -> bool:
    return bool(_received)


def terminated_exit() -> int | None:
    """The exit code when SIGTERM or SIGHUP, not Ctrl-C, interrupted the command (for commands whose normal
    end is Ctrl-C, like `logs -f`)."""
    return interrupted_exit() if _received and _received[-1] != signal.SIGINT else None


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
        leave(interrupted_exit())
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
