"""Small helpers shared by the tests: run the CLI as users do, write specs."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
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
