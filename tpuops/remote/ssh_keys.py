"""The SSH keys of one cluster: its private key (refused when others could read it, as OpenSSH does) and its
`known_hosts`, checked by tpuops rather than by paramiko's policies.

Entries pinned by `up` (from the TPU's guest attributes) are checked; a worker without an entry is trusted on first
use and appended, so the next command (and `tpuops ssh`, which reads the same file) checks against it; a changed
key is refused. `AutoAddPolicy` is never used.
"""

from __future__ import annotations

import stat
import threading
from collections.abc import Callable
from pathlib import Path

import paramiko

from tpuops.errors import HostKeyError, RemoteError
from tpuops.keys import known_hosts_name


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
