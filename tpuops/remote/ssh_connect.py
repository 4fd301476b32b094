"""One worker's SSH connection: where it is (`SshTarget`), what every connection of a cluster shares
(`SshSettings`), and opening the paramiko transport, retried with backoff within the connect timeout.

Choices, each measured or learned the hard way on pod slices:
- We open the TCP socket ourselves to set TCP_NODELAY: without it paramiko adds ~50 ms to every command
  on a reused connection (Nagle + delayed ACK).
- `clear_to_send_timeout` is raised: under parallel load (32+ key exchanges at once) paramiko's default
  30 s wait for the key exchange to finish times out.
- Connecting is retried with backoff (tenacity) within `connect_timeout`: right after a TPU turns READY
  its sshd is often not up yet, and a pod slice refuses some of many simultaneous connections.
- The host key type we pinned is negotiated first, so a pinned ed25519 key is compared with an ed25519 key.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from tpuops.errors import RemoteError
from tpuops.remote.base import interrupted_error
from tpuops.remote.ssh_keys import KnownHosts
from tpuops.retry import bounded_by

CLEAR_TO_SEND_TIMEOUT = 180.0
KEEPALIVE_SECONDS = 30
WINDOW_SIZE = 8 * 1024 * 1024  # larger than paramiko's 2 MiB default: pushes stream megabytes per channel
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


class Unreachable(RemoteError):
    """One failed connection attempt that is worth retrying (refused, reset, timed out, no banner)."""


class Interrupted(RemoteError):
    """The runner was cancelled (Ctrl-C, a closed stdout): no more attempts."""


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True)
class Connector:
    """Opens authenticated transports to one worker; `cancelled` (set from any thread) stops the attempts."""

    target: SshTarget
    settings: SshSettings
    known_hosts: KnownHosts
    cancelled: threading.Event

    def open(self, key: paramiko.PKey) -> paramiko.Transport:
        """A transport, retried within the connect timeout; RemoteError saying what to check when it fails."""
        policy = bounded_by(self.settings.connect_timeout, initial=0.3, maximum=5.0, retry_on=Unreachable)
        target = self.target
        started = time.monotonic()
        try:
            return policy(self._open_once, key, started)
        except Unreachable as err:
            waited = min(time.monotonic() - started, self.settings.connect_timeout)
            raise RemoteError(
                f"{target.name}: cannot connect to {target.host}:{target.port} (gave up after {waited:.0f} s): "
                f"{err.message}",
                "is the TPU READY (`tpuops status`)? is sshd running there, and does the firewall allow SSH "
                "from here?",
            ) from None

    def _open_once(self, key: paramiko.PKey, started: float) -> paramiko.Transport:
        target, settings = self.target, self.settings
        if self.cancelled.is_set():
            raise Interrupted(interrupted_error(target.name))
        transport = paramiko.Transport(self._socket(started), default_window_size=WINDOW_SIZE)
        transport.banner_timeout = settings.attempt_timeout
        transport.handshake_timeout = settings.attempt_timeout
        transport.auth_timeout = settings.attempt_timeout
        transport.clear_to_send_timeout = CLEAR_TO_SEND_TIMEOUT
        self._prefer_pinned_key_types(transport)
        try:
            transport.start_client(timeout=settings.attempt_timeout)
        except (paramiko.SSHException, EOFError, OSError) as err:
            transport.close()
            raise Unreachable(f"SSH handshake failed: {err or type(err).__name__}") from None
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
            raise Unreachable(f"authentication did not complete: {err or type(err).__name__}") from None
        except BaseException:
            transport.close()
            raise
        transport.set_keepalive(KEEPALIVE_SECONDS)
        return transport

    def _socket(self, started: float) -> socket.socket:
        """The TCP connection, TCP_NODELAY set; a refusal that has lasted `refused_timeout` is final."""
        target, settings = self.target, self.settings
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
            raise Unreachable(reason) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

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
