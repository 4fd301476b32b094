"""SSH runner on paramiko, with pinned or trust-on-first-use host keys: one worker, one connection per tpuops
command, reused for every call (a push makes two or three).

The parts, each in its own module and importable from here as before:
- remote/ssh_keys.py: the cluster's private key and its `known_hosts` (checked by us, trust on first use,
  a changed key refused; never `AutoAddPolicy`);
- remote/ssh_connect.py: the worker (`SshTarget`), the settings every connection shares (`SshSettings`), and
  opening the transport (TCP_NODELAY, retries within the connect timeout, the pinned key type first);
- remote/ssh_channel.py: one command's stdin, stdout and stderr on the connection.

A worker that could not be reached within the connect timeout is not tried again by the same runner: its later
commands fail at once with the same error, so one dead worker costs a command one timeout, not one per step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

import paramiko

from tpuops.errors import RemoteError
from tpuops.remote.base import (
    Command,
    LineHandler,
    LineSplitter,
    RunResult,
    Stdin,
    interrupted_error,
    shell_line,
    timeout_error,
)
from tpuops.remote.ssh_channel import StdinSender, pump
from tpuops.remote.ssh_connect import Connector, Interrupted, SshSettings, SshTarget, is_loopback
from tpuops.remote.ssh_keys import KnownHosts, known_hosts_name, load_private_key
from tpuops.shipped import script_command

__all__ = ["KnownHosts", "SshRunner", "SshSettings", "SshTarget", "known_hosts_name", "load_private_key"]

# paramiko logs "Socket exception: Bad file descriptor" when a connection is closed under its reader thread
# (Ctrl-C, a closed pipe); Python's last-resort handler would print that. Our results say what went wrong.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SshRunner:
    """Runs commands on one worker over one paramiko connection, opened on first use."""

    def __init__(self, target: SshTarget, settings: SshSettings, known_hosts: KnownHosts,
                 key: paramiko.PKey | None = None) -> None:
        self.name = target.name
        self.target = target
        self.nearby = is_loopback(target.host)
        self.settings = settings
        self.known_hosts = known_hosts
        self._key = key
        self._transport: paramiko.Transport | None = None
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._unreachable: RemoteError | None = None  # why connecting failed, once it has
        self._connector = Connector(target, settings, known_hosts, self._cancelled)

    # ------------------------------------------------------------------------------------ connection

    def connect(self) -> paramiko.Transport:
        with self._lock:
            if self._unreachable is not None:
                raise self._unreachable
            if self._transport is None or not self._transport.is_active():
                try:
                    self._key = self._key or load_private_key(self.settings.key_path)
                    self._transport = self._connector.open(self._key)
                except Interrupted:
                    raise
                except RemoteError as err:
                    self._unreachable = err
                    raise
            if self._cancelled.is_set():  # cancelled while connecting: cancel() may have missed this one
                self._transport.close()
                raise Interrupted(interrupted_error(self.name))
            return self._transport

    def close(self) -> None:
        with self._lock:
            if self._transport is not None:
                self._transport.close()
                self._transport = None

    def cancel(self) -> None:
        """Close the connection from any thread without waiting for a connect in progress: sshd then closes
        the session, and the command, run under `hangup.sh`, is signalled."""
        self._cancelled.set()
        transport = self._transport
        if transport is not None:
            transport.close()

    # ------------------------------------------------------------------------------------------- run

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
        line = shell_line(command, env=env, cwd=cwd, timeout=timeout)
        if stdin is None:
            # Ends with our session (Ctrl-C, closed pipe, lost connection): see shipped/hangup.sh. Its
            # watcher reads stdin, which therefore stays open (no EOF) until the channel closes.
            line = shell_line(script_command("hangup", line))
        started = time.monotonic()
        transport = self.connect()
        try:
            channel = transport.open_session(timeout=self.settings.attempt_timeout)
            channel.exec_command(line)
        except (paramiko.SSHException, EOFError, OSError) as err:
            if self._cancelled.is_set():
                raise Interrupted(interrupted_error(self.name)) from None
            raise RemoteError(f"{self.name}: could not start the command: {err or type(err).__name__}",
                              "try again; if it persists, check the worker with `tpuops ssh`") from None
        # The worker stops the command at `timeout`; our own deadline only covers a connection gone silent.
        deadline = None if timeout is None else started + timeout + 30
        sender = StdinSender(channel, stdin)
        out = LineSplitter(self.name, "stdout", on_line, capture)
        err = LineSplitter(self.name, "stderr", on_line, capture)
        try:
            lost = pump(channel, out, err, deadline)
        finally:
            if self._cancelled.is_set() or not channel.exit_status_ready():
                channel.close()  # a handler raised (closed stdout) or we were cancelled: end the session
        sender.join()
        exit_code = None if lost else channel.recv_exit_status()
        channel.close()
        duration = time.monotonic() - started
        if self._cancelled.is_set() and lost:
            exit_code, error = None, interrupted_error(self.name)
        elif exit_code == -1:  # no exit-status: the command died from a signal
            exit_code, error = None, f"{self.name}: command was killed by a signal"
        elif lost:
            error = f"{self.name}: {lost}"
        else:
            error = timeout_error(self.name, timeout, exit_code, duration) or sender.error
        return RunResult(self.name, exit_code, duration, error, out.finish(), err.finish(), sender.sent)
