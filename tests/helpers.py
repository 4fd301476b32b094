"""Small helpers shared by the tests: run the CLI as users do, write specs."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest


def run_cli(*args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 120, input_text: str | None = None,
            prefix: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`tpuops ARGS` in a subprocess (the real entry point), with the test's environment; `prefix` runs it under
    another program (e.g. setpriv)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "tpuops", *args], env=full_env, cwd=cwd, capture_output=True, text=True,
        timeout=timeout, input=input_text,
    )


def write_spec(directory: Path, text: str, name: str = "spec.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def require_module(name: str) -> None:
    """Skip unless `name` is installed, without importing it: the heavy frameworks run in subprocesses, and two
    of them (torch_xla after TensorFlow or JAX) in one process can abort the whole test session."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed")


def interrupt(process: subprocess.Popen[str], timeout: float = 60.0,
              signum: int = signal.SIGINT) -> tuple[str, str]:
    """Ctrl-C (or `signum`) to a CLI subprocess, then its output; killed if it does not end within `timeout`."""
    process.send_signal(signum)
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def assert_clean_exit(stderr: str) -> None:
    """What an interrupted command may never print: a traceback, Python's shutdown noise, a core dump."""
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert "Aborted" not in stderr, stderr


def run_on_pty(args: Sequence[str], *, columns: int = 80, lines: int = 24, env: Mapping[str, str] | None = None,
               stdin_on_pty: bool = True, stderr: Path | None = None, timeout: float = 60) -> tuple[int, str]:
    """`tpuops ARGS` with stdout (and stdin, unless `stdin_on_pty` is False) on a pseudo-terminal of that size,
    as a user sees it: its exit code and its whole output. stderr goes on the terminal too, or into the file
    `stderr` when one is given. COLUMNS and LINES are not inherited: the terminal's own size is what is tested."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    inherited = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    errors = stderr.open("wb") if stderr is not None else follower
    process = subprocess.Popen([sys.executable, "-m", "tpuops", *args], stdout=follower, stderr=errors,
                               stdin=follower if stdin_on_pty else subprocess.DEVNULL,
                               env={**inherited, "TERM": "xterm-256color", **(env or {})}, close_fds=True)
    if stderr is not None:
        errors.close()  # type: ignore[union-attr]
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif process.poll() is not None:
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        os.close(leader)
    return code, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
