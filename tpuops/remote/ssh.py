"""SSH runner on paramiko, with pinned or trust-on-first-use host keys.

Choices, each measured or learned the hard way on pod slices:
- We open the TCP socket ourselves to set TCP_NODELAY: without it paramiko adds ~50 ms to every command
  on a reused connection (Nagle + delayed ACK).
- `clear_to_send_timeout` is raised: under parallel load (32+ key exchanges at once) paramiko's default
  30 s wait for the key exchange to finish times out.
- Connecting is retried with backoff (tenacity) within `connect_timeout`: right after a TPU turns READY
  its sshd is often not up yet, and a pod slice refuses some of many simultaneous connections.
- One connection per worker per tpuops command: `run` reuses it for every call (a push makes two or three).
  A worker that could not be reached within the connect timeout is not tried again by the same runner: its
  later commands fail at once with the same error, so one dead worker costs a command one timeout, not one
  per step.
- Host keys: the cluster's `known_hosts` (pinned by `up` from the TPU's guest attributes) is checked
  by us, not by paramiko's policies; a worker without an entry is trusted on first use and appended;
  a changed key is refused. We never use `AutoAddPolicy`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import select
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import paramiko

from tpuops.errors import HostKeyError, RemoteError
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
from tpuops.retry import bounded_by
from tpuops.shipped import script_command

# paramiko logs "Socket exception: Bad file descriptor" when a connection is closed under its reader thread
# (Ctrl-C, a closed pipe); Python's last-resort handler would print that. Our results say what went wrong.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

CLEAR_TO_SEND_TIMEOUT = 180.0
KEEPALIVE_SECONDS = 30
WINDOW_SIZE = 8 * 1024 * 1024  # larger than paramiko's 2 MiB default: pushes stream megabytes per channel
STDIN_CHUNK = 256 * 1024
# Key types that count as "the same kind" when preferring a pinned key's type during key exchange.
RSA_TYPES = ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]


@dataclass(frozen=True)
class SshTarget:
    """One worker as SSH sees it. `name` is what users read in output and errors ("w3")."""

    name: str
    host: str
    port: int
    user: str


@dataclass(frozen=True)
class SshSettings:
    """What every connection of one cluster shares."""

    key_path: Path
    known_hosts_path: Path
    connect_timeout: float = 60.0  # total wait for a worker whose sshd is not up yet
    attempt_timeout: float = 15.0  # one TCP connect + banner + key exchange
    trust_on_first_use: bool = True
    # Total wait for a worker that actively refuses connections. None: as long as connect_timeout (a worker
    # that just booted refuses until its sshd is up); a few seconds for workers that have been up a while,
    # where a refusal means sshd is down or the port is wrong, and waiting a minute helps nobody.
    refused_timeout: float | None = None


class _Unreachable(RemoteError):
    """One failed connection attempt that is worth retrying (refused, reset, timed out, no banner)."""


class _Interrupted(RemoteError):
    """The runner was cancelled (Ctrl-C, a closed stdout): no more attempts."""


def known_hosts_name(host: str, port: int) -> str:
    """The host's name in OpenSSH's known_hosts format: `host`, or `[host]:port` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


def load_private_key(path: Path) -> paramiko.PKey:
    """Load the cluster's key, refusing one other users could read (as OpenSSH does)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise RemoteError(
            f"the cluster's SSH key {path} does not exist", "run `tpuops up SPEC` to create the cluster and its key"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise RemoteError(f"the SSH key {path} is readable by other users", f"run `chmod 600 {path}`")
    try:
        return paramiko.PKey.from_path(path)
    except (paramiko.SSHException, ValueError) as err:
        raise RemoteError(f"cannot load the SSH key {path}: {err}", "re-create it with `tpuops up SPEC`") from None


class KnownHosts:
    """The cluster's known_hosts file, shared by all runners of one command (thread-safe).

    Entries pinned by `up` are checked; a host without entries is trusted on first use and appended, so
    the next command (and `tpuops ssh`, which reads the same file) checks against it.
    """

    def __init__(self, path: Path, trust_on_first_use: bool = True,
                 on_new_key: Callable[[str, str], None] | None = None) -> None:
        self.path = path
        self.trust_on_first_use = trust_on_first_use
        self.on_new_key = on_new_key
        self._lock = threading.Lock()
        self._keys = paramiko.HostKeys()
        if path.exists():
            self._keys.load(str(path))

    def key_types(self, host: str, port: int) -> list[str]:
        with self._lock:
            entry = self._keys.lookup(known_hosts_name(host, port))
            return list(entry.keys()) if entry else []

    def check(self, worker: str, host: str, port: int, key: paramiko.PKey) -> None:
        name = known_hosts_name(host, port)
        with self._lock:
            entry = self._keys.lookup(name)
            if entry:
                pinned = entry.get(key.get_name())
                if pinned is not None and pinned == key:
                    return
                raise HostKeyError(
                    f"{worker}: host key of {name} changed (now {key.get_name()} {key.fingerprint}); refusing "
                    "to connect",
                    f"if the worker was re-created, remove its line from {self.path} or run `tpuops up` again; "
                    "otherwise someone may be intercepting the connection",
                )
            if not self.trust_on_first_use:
                raise HostKeyError(
                    f"{worker}: no pinned host key for {name}", f"run `tpuops up` to pin it into {self.path}"
                )
            self._keys.add(name, key.get_name(), key)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as handle:
                handle.write(f"{name} {key.get_name()} {key.get_base64()}\n")
        if self.on_new_key:
            self.on_new_key(worker, f"{key.get_name()} {key.fingerprint}")


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class SshRunner:
    """Runs commands on one worker over one paramiko connection, opened on first use."""

    def __init__(self, target: SshTarget, settings: SshSettings, known_hosts: KnownHosts,
                 key: paramiko.PKey | None = None) -> None:
        self.name = target.name
        self.target = target
        self.nearby = _is_loopback(target.host)
        self.settings = settings
        self.known_hosts = known_hosts
        self._key = key
        self._transport: paramiko.Transport | None = None
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._unreachable: RemoteError | None = None  # why connecting failed, once it has

    # ------------------------------------------------------------------------------------ connection

    def connect(self) -> paramiko.Transport:
        with self._lock:
            if self._unreachable is not None:
                raise self._unreachable
            if self._transport is None or not self._transport.is_active():
                try:
                    self._transport = self._connect_with_retries()
                except _Interrupted:
                    raise
                except RemoteError as err:
                    self._unreachable = err
                    raise
            if self._cancelled.is_set():  # cancelled while connecting: cancel() may have missed this one
                self._transport.close()
                raise _Interrupted(interrupted_error(self.name))
            return self._transport

    def _connect_with_retries(self) -> paramiko.Transport:
        key = self._key or load_private_key(self.settings.key_path)
        self._key = key
        policy = bounded_by(self.settings.connect_timeout, initial=0.3, maximum=5.0, retry_on=_Unreachable)
        target = self.target
        started = time.monotonic()
        try:
            return policy(self._connect_once, key, started)
        except _Unreachable as err:
            waited = min(time.monotonic() - started, self.settings.connect_timeout)
            raise RemoteError(
                f"{target.name}: cannot connect to {target.host}:{target.port} (gave up after {waited:.0f} s): "
                f"{err.message}",
                "is the TPU READY (`tpuops status`)? is sshd running there, and does the firewall allow SSH "
                "from here?",
            ) from None

    def _connect_once(self, key: paramiko.PKey, started: float) -> paramiko.Transport:
        target, settings = self.target, self.settings
        if self._cancelled.is_set():
            raise _Interrupted(interrupted_error(target.name))
        try:
            sock = socket.create_connection((target.host, target.port), timeout=settings.attempt_timeout)
        except OSError as err:
            reason = err.strerror or str(err) or type(err).__name__
            refused_for = time.monotonic() - started
            if err.errno == errno.ECONNREFUSED and settings.refused_timeout is not None \
                    and refused_for >= settings.refused_timeout:
                raise RemoteError(
                    f"{target.name}: {target.host}:{target.port} refused the connection "
                    f"(for {refused_for:.0f} s): {reason}",
                    "the worker has been up a while, so its sshd is down or the port is wrong: check `tpuops "
                    "status`, or pass --connect-timeout to keep trying longer",
                ) from None
            raise _Unreachable(reason) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport = paramiko.Transport(sock, default_window_size=WINDOW_SIZE)
        transport.banner_timeout = settings.attempt_timeout
        transport.handshake_timeout = settings.attempt_timeout
        transport.auth_timeout = settings.attempt_timeout
        transport.clear_to_send_timeout = CLEAR_TO_SEND_TIMEOUT
        self._prefer_pinned_key_types(transport)
        try:
            transport.start_client(timeout=settings.attempt_timeout)
        except (paramiko.SSHException, EOFError, OSError) as err:
            transport.close()
            raise _Unreachable(f"SSH handshake failed: {err or type(err).__name__}") from None
        try:
            self.known_hosts.check(target.name, target.host, target.port, transport.get_remote_server_key())
            transport.auth_publickey(target.user, key)
        except paramiko.AuthenticationException:
            transport.close()
            raise RemoteError(
                f"{target.name}: {target.user}@{target.host} refused the cluster's key",
                "check `ssh.user` in the spec, or run `tpuops up` again to install the key",
            ) from None
        except (paramiko.SSHException, EOFError, OSError) as err:
            transport.close()
            raise _Unreachable(f"authentication did not complete: {err or type(err).__name__}") from None
        except BaseException:
            transport.close()
            raise
        transport.set_keepalive(KEEPALIVE_SECONDS)
        return transport

    def _prefer_pinned_key_types(self, transport: paramiko.Transport) -> None:
        """Negotiate the host key type we have pinned, so a pinned ed25519 key is compared with ed25519."""
        pinned = self.known_hosts.key_types(self.target.host, self.target.port)
        if not pinned:
            return
        wanted: list[str] = []
        for kind in pinned:
            wanted.extend(RSA_TYPES if kind == "ssh-rsa" else [kind])
        options = transport.get_security_options()
        available = list(options.key_types)
        options.key_types = [k for k in wanted if k in available] + [k for k in available if k not in wanted]

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
                raise _Interrupted(interrupted_error(self.name)) from None
            raise RemoteError(f"{self.name}: could not start the command: {err or type(err).__name__}",
                              "try again; if it persists, check the worker with `tpuops ssh`") from None
        # The worker stops the command at `timeout`; our own deadline only covers a connection gone silent.
        deadline = None if timeout is None else started + timeout + 30
        sender = _StdinSender(channel, stdin)
        out = LineSplitter(self.name, "stdout", on_line, capture)
        err = LineSplitter(self.name, "stderr", on_line, capture)
        try:
            lost = _pump(channel, out, err, deadline)
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


class _StdinSender:
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


def _pump(channel: paramiko.Channel, out: LineSplitter, err: LineSplitter, deadline: float | None) -> str | None:
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
