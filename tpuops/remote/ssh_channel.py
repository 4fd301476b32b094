"""One command's channel on an open SSH connection: its stdin fed from a thread, its stdout and stderr read
line by line until it ends or the connection is lost (what `SshRunner.run` does with them: remote/ssh.py)."""

from __future__ import annotations

import contextlib
import select
import threading
import time

import paramiko

from tpuops.remote.base import LineSplitter, Stdin, iter_stdin

STDIN_CHUNK = 256 * 1024


class StdinSender:
    """Feeds stdin from a thread, so a command that writes much output while reading cannot deadlock us."""

    def __init__(self, channel: paramiko.Channel, stdin: Stdin) -> None:
        self.channel = channel
        self.sent = 0
        self.error: str | None = None
        self._thread: threading.Thread | None = None
        if stdin is not None:
            self._thread = threading.Thread(target=self._send, args=(stdin,), daemon=True)
            self._thread.start()

    def _send(self, stdin: Stdin) -> None:
        try:
            for chunk in iter_stdin(stdin):
                for start in range(0, len(chunk), STDIN_CHUNK):
                    piece = chunk[start:start + STDIN_CHUNK]
                    self.channel.sendall(piece)
                    self.sent += len(piece)
        except (OSError, EOFError, paramiko.SSHException) as err:
            self.error = f"sending input failed: {err}"
        finally:
            with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                self.channel.shutdown_write()  # the command sees its input end, also when producing it failed

    def join(self) -> None:
        # The command has ended: whatever stdin still had to say is moot (a relay's stdin, kept open until
        # the other workers finish, ends by itself), so wait only briefly.
        if self._thread is not None:
            self._thread.join(timeout=2)


def pump(channel: paramiko.Channel, out: LineSplitter, err: LineSplitter, deadline: float | None) -> str | None:
    """Read stdout and stderr until the command ends; returns why the connection was lost, or None."""
    fileno = channel.fileno()  # readable when either stream has data or the channel closed
    transport = channel.get_transport()
    while True:
        drained = False
        while channel.recv_ready():
            out.feed(channel.recv(65536))
            drained = True
        while channel.recv_stderr_ready():
            err.feed(channel.recv_stderr(65536))
            drained = True
        if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
            # drain what arrived with the exit status, then stop
            while (chunk := channel.recv(65536)):
                out.feed(chunk)
            while (chunk := channel.recv_stderr(65536)):
                err.feed(chunk)
            return None
        if channel.closed or (transport is not None and not transport.is_active()):
            if channel.exit_status_ready():
                continue
            return "connection lost before the command finished"
        if deadline is not None and time.monotonic() > deadline:
            return "no answer from the worker; gave up after the command's timeout"
        if not drained:
            # paramiko's pipe is readable while data is buffered; the recv_* calls above clear it
            select.select([fileno], [], [], 0.5)
