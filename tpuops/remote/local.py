"""Local-process runner: a "worker" that is a directory on this machine (the local simulator's workers).

Commands get exactly the same shell line an SSH worker gets (exports, cd, `timeout`), run by `/bin/sh`
with HOME set to the worker's directory, so `~/tpuops/NAME/code` lands in that worker's own tree and the
workflows above cannot tell the difference.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from tpuops.remote.base import (
    Command,
    LineHandler,
    LineSplitter,
    RunResult,
    Stdin,
    interrupted_error,
    iter_stdin,
    shell_line,
    timeout_error,
)

# What a fresh login would have: enough to find sh, python3, tar, timeout; not the caller's whole env.
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
HANGUP_GRACE_SECONDS = 3.0  # after HUP, before KILL (as shipped/hangup.sh does on SSH workers)
PIPE_BYTES = 1024 * 1024  # a command's stdin pipe, where Linux allows (see _widen)


def worker_path() -> str:
    """This interpreter's directory first, so `python3` on a simulated worker is the one running tpuops (a
    virtual environment that was never activated still has numpy and tensorboard for the trainer)."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", BASE_PATH)])


class LocalRunner:
    nearby = True

    def __init__(self, name: str, home: Path, base_env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.home = home
        self.base_env = dict(base_env) if base_env is not None else {"PATH": worker_path()}
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen] = set()
        self._cancelled = False

    def run(
        self,
        command: Command,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        on_line: LineHandler | None = None,
        stdin: Stdin = None,
        capture: bool = False,
    ) -> RunResult:
        self.home.mkdir(parents=True, exist_ok=True)
        line = shell_line(command, env=env, cwd=cwd, timeout=timeout)
        started = time.monotonic()
        with self._lock:
            if self._cancelled:
                return RunResult(self.name, None, 0.0, interrupted_error(self.name))
            process = self._start(line, stdin)
            self._live.add(process)
        try:
            return self._finish(process, started, timeout, on_line, stdin, capture)
        finally:
            with self._lock:
                self._live.discard(process)

    def _start(self, line: str, stdin: Stdin) -> subprocess.Popen:
        process = subprocess.Popen(
            ["/bin/sh", "-c", line],
            cwd=self.home,
            env={**self.base_env, "HOME": str(self.home), "SHELL": "/bin/sh"},
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout or a cancel stops its children too
        )
        if process.stdin is not None:
            _widen(process.stdin)
        return process

    def _finish(self, process: subprocess.Popen, started: float, timeout: float | None,
                on_line: LineHandler | None, stdin: Stdin, capture: bool) -> RunResult:
        out = LineSplitter(self.name, "stdout", on_line, capture)
        err = LineSplitter(self.name, "stderr", on_line, capture)
        raised: list[BaseException] = []
        readers = [_reader(process, process.stdout, out, raised), _reader(process, process.stderr, err, raised)]
        sent, send_error = _feed(process, stdin)
        try:
            exit_code: int | None = process.wait(timeout=None if timeout is None else timeout + 30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            exit_code = process.wait(timeout=10)
        for reader in readers:
            reader.join(timeout=10)
        if raised:
            raise raised[0]  # a handler's OutputClosed: the group was stopped, the caller stops the rest
        duration = time.monotonic() - started
        error = timeout_error(self.name, timeout, exit_code, duration) or send_error
        if self._cancelled and exit_code is not None and exit_code < 0:
            exit_code, error = None, interrupted_error(self.name)
        elif exit_code is not None and exit_code < 0:
            exit_code, error = None, f"{self.name}: command was killed by signal {-exit_code}"
        return RunResult(self.name, exit_code, duration, error, out.finish(), err.finish(), sent)

    def close(self) -> None:
        """Nothing is kept open between commands."""

    def cancel(self) -> None:
        """HUP the process group of every command in flight (KILL after a grace period); no new ones start."""
        with self._lock:
            self._cancelled = True
            live = list(self._live)
        for process in live:
            _signal_group(process.pid, signal.SIGHUP)
        if live:
            timer = threading.Timer(HANGUP_GRACE_SECONDS, lambda: [_signal_group(p.pid, signal.SIGKILL) for p in live])
            timer.daemon = True
            timer.start()


def _widen(pipe) -> None:  # noqa: ANN001  (a binary pipe)
    """A 1 MiB pipe instead of 64 KiB where Linux allows it: a push streams hundreds of MB into a worker's
    stdin, and each refill of a small pipe is a wake-up of both processes."""
    import fcntl

    with suppress(AttributeError, OSError):
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pgid, sig)


def _reader(process: subprocess.Popen, stream, splitter: LineSplitter,  # noqa: ANN001  (a binary pipe)
            raised: list[BaseException]) -> threading.Thread:
    def pump() -> None:
        try:
            while chunk := stream.read1(65536):
                splitter.feed(chunk)
        except BaseException as err:  # noqa: BLE001  a handler gave up (closed stdout): stop the command
            raised.append(err)
            _signal_group(process.pid, signal.SIGHUP)
        finally:
            stream.close()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def _feed(process: subprocess.Popen, stdin: Stdin) -> tuple[int, str | None]:
    if process.stdin is None:
        return 0, None
    sent = 0
    try:
        for chunk in iter_stdin(stdin):
            process.stdin.write(chunk)
            process.stdin.flush()  # a chunk from a live iterable (a heartbeat) is due now, not when a buffer fills
            sent += len(chunk)
    except (BrokenPipeError, OSError) as err:
        return sent, f"sending input failed: {err}"
    finally:
        with suppress(OSError):  # the command sees its input end, also when producing it failed
            process.stdin.close()
    return sent, None
