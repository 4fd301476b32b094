"""The Runner interface: run one command on one worker, with explicit env, streamed output and a timeout.

Two implementations: `ssh.SshRunner` (paramiko, real TPU workers) and `local.LocalRunner` (a process in a
directory, for the local simulator). Everything above this layer (fan-out, push, launch) talks to `Runner`
only, so the same workflows run against SSH workers, loopback sshd in tests and local directories.

A command is either a shell line (`str`, run by the worker's login shell, as `ssh host 'line'` would) or an
argv (`Sequence[str]`, every element quoted with `shlex.quote`, so hostile text stays one literal argument).
The environment is never interpolated raw: names are checked, values quoted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, Union

from tpuops.errors import UsageError

# A shell line (str) or an argv whose elements are each quoted (sequence of str).
Command = Union[str, Sequence[str]]  # noqa: UP007  (keeps the alias usable at runtime on 3.10)

# What to feed the command's stdin: nothing (EOF at once), bytes, or chunks from an iterable. The iterable
# may block between chunks; stdin is closed when it ends (the push relay uses this to keep a server up).
Stdin = Union[bytes, Iterable[bytes], None]  # noqa: UP007

# Called once per complete output line: (worker name, "stdout" | "stderr", line without newline).
LineHandler = Callable[[str, str, str], None]


class LineSink:
    """A LineHandler that also takes a chunk's lines at once and is flushed after each chunk: 100k lines
    then cost a few writes per network chunk instead of 100k calls, and still appear as they arrive."""

    def __call__(self, worker: str, stream: str, line: str) -> None:
        self.lines(worker, stream, [line])

    def lines(self, worker: str, stream: str, lines: list[str]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Called after each chunk of lines."""

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TIMEOUT_EXIT_CODE = 124  # what coreutils `timeout` returns when it had to stop the command
KILL_GRACE_SECONDS = 5  # SIGTERM first, SIGKILL this long after


class OutputClosed(Exception):  # noqa: N818  (not an error: the reader of our output has gone)
    """Raised by a LineHandler whose output was closed (`tpuops exec ... | head -1`): everything stops, quietly.

    Not a TpuopsError on purpose: fan-out turns those into one worker's failure, this one stops every worker.
    """


@dataclass(frozen=True)
class RunResult:
    """What happened to one command on one worker.

    `exit_code` is None when the command never produced one (worker unreachable, host key refused,
    connection lost, killed by a signal); `error` then says why, in one line naming the worker.
    """

    worker: str
    exit_code: int | None
    duration: float
    error: str | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    bytes_sent: int = 0  # stdin bytes this command sent to the worker (push accounting)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.error is None

    def program_failure(self, program: str, needs_python: str) -> str:
        """Why a program we sent failed, in one line: the connection's error, else the last line it wrote
        (without its `PROGRAM: ` prefix), else its exit code; exit 127 means the worker has no python3."""
        if self.error:
            return self.error
        detail = self.stderr.decode("utf-8", "replace").strip().splitlines()
        if self.exit_code == 127:
            return f"python3 not found on the worker ({needs_python})"
        return detail[-1].removeprefix(f"{program}: ") if detail else f"exit code {self.exit_code}"

    def as_dict(self) -> dict[str, object]:
        return {
            "worker": self.worker,
            "exit_code": self.exit_code,
            "duration": round(self.duration, 3),
            "error": self.error,
            "ok": self.ok,
            "bytes_sent": self.bytes_sent,
        }


class Runner(Protocol):
    """One worker. `run` may be called several times; implementations reuse one connection for them."""

    name: str
    nearby: bool  # on this machine (a local directory, loopback): what it is sent is not worth compressing

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
    ) -> RunResult: ...

    def close(self) -> None: ...

    def cancel(self) -> None:
        """From another thread: stop now. The command in flight is signalled on the worker (as `ssh` does
        when its session closes), `run` returns promptly with an error, and the runner takes no more work."""
        ...


# ------------------------------------------------------------------------------------------ command lines


def remote_path(path: str) -> str:
    """Quote a worker path for the shell, keeping a leading `~/` meaning the worker's home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def command_of_words(words: Sequence[str]) -> Command:
    """What the words after `--` mean, for every command that takes them (exec, launch, ssh): one word is a
    shell line (`-- 'pgrep -af python'`), several are an argv that must arrive exactly as given."""
    return words[0] if len(words) == 1 else tuple(words)


def command_text(command: Command) -> str:
    """The command as the shell should see it: a shell line as is, an argv quoted element by element."""
    if isinstance(command, str):
        return command
    if not command:
        raise UsageError("empty command", "give the command after `--`, e.g. `tpuops exec NAME -- hostname`")
    return " ".join(shlex.quote(arg) for arg in command)


def shell_line(
    command: Command,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
) -> str:
    """Build the one line handed to the worker's shell: exports, cd, then the command (under `timeout`)."""
    parts: list[str] = []
    for name, value in (env or {}).items():
        if not ENV_NAME_RE.match(name):
            raise UsageError(f"{name!r} is not a valid environment variable name")
        parts.append(f"export {name}={shlex.quote(value)};")
    if cwd:
        parts.append(f"cd {remote_path(cwd)} &&")
    text = command_text(command)
    if timeout is not None:
        # The worker enforces the timeout itself, so a lost connection does not leave the command running
        # forever; a shell line runs under the user's shell as it would without a timeout.
        limit = f"timeout -k {KILL_GRACE_SECONDS} {max(timeout, 0.001):g}"
        if isinstance(command, str):
            text = f'{limit} "${{SHELL:-/bin/sh}}" -c {shlex.quote(text)}'
        else:
            text = f"{limit} {text}"
    parts.append(text)
    return " ".join(parts)


def iter_stdin(stdin: Stdin) -> Iterable[bytes]:
    if stdin is None:
        return ()
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return (bytes(stdin),)
    return stdin


class LineSplitter:
    """Turns chunks of bytes into complete lines for a LineHandler, keeping an optional full copy."""

    def __init__(self, worker: str, stream: str, on_line: LineHandler | None, capture: bool) -> None:
        self.worker, self.stream, self.on_line, self.capture = worker, stream, on_line, capture
        self._sink = on_line if isinstance(on_line, LineSink) else None
        self._pending = b""
        self._captured: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        if self.capture:
            self._captured.append(chunk)
        if self.on_line is None:
            return
        self._pending += chunk
        end = self._pending.rfind(b"\n")
        if end < 0:
            return
        # A newline byte never occurs inside a UTF-8 character: the complete lines decode as one block.
        complete, self._pending = self._pending[:end], self._pending[end + 1:]
        self._emit(complete.decode("utf-8", "replace").split("\n"))

    def finish(self) -> bytes:
        if self.on_line is not None and self._pending:
            self._emit([self._pending.decode("utf-8", "replace")])
            self._pending = b""
        return b"".join(self._captured)

    def _emit(self, lines: list[str]) -> None:
        if self._sink is not None:
            self._sink.lines(self.worker, self.stream, lines)
            self._sink.flush()
            return
        assert self.on_line is not None
        for line in lines:
            self.on_line(self.worker, self.stream, line)


def timeout_error(worker: str, timeout: float | None, exit_code: int | None, duration: float) -> str | None:
    """The one-line error for a command the worker's `timeout` stopped (exit 124 after the limit)."""
    if timeout is not None and exit_code == TIMEOUT_EXIT_CODE and duration >= timeout * 0.9:
        return f"{worker}: command timed out after {timeout:g} s and was stopped"
    return None


def interrupted_error(worker: str) -> str:
    return f"{worker}: interrupted; the command was signalled to stop"
