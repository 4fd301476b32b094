"""The cluster's SSH key pair and its pinned host keys.

One ed25519 key pair per cluster, generated once, private key 0600, in the cluster's state directory;
its public key goes into the `ssh-keys` metadata of the TPU and the client VM. Host keys the workers
publish (guest attributes `hostkeys/`) are written to `known_hosts` beside it, so the remote layer
checks them instead of trusting whatever answers first.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tpuops.atomic import write_atomic

PRIVATE_KEY = "id_ed25519"
KNOWN_HOSTS = "known_hosts"


def known_hosts_name(host: str, port: int) -> str:
    """The host's name in OpenSSH's known_hosts format: `host`, or `[host]:port` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


@dataclass(frozen=True)
class KeyPair:
    private_path: Path
    public_key: str  # "ssh-ed25519 AAAA... tpuops-NAME"


@dataclass(frozen=True)
class PinnedKey:
    host: str
    port: int
    key_type: str
    key: str

    @property
    def host_field(self) -> str:
        return known_hosts_name(self.host, self.port)

    def line(self) -> str:
        return f"{self.host_field} {self.key_type} {self.key}"


def ssh_user(configured: str | None) -> str:
    return configured or getpass.getuser()


def ensure_key_pair(directory: Path, cluster: str) -> KeyPair:
    """The cluster's key pair, generated on first use; the private key is created 0600, never wider."""
    private_path = directory / PRIVATE_KEY
    public_path = directory / f"{PRIVATE_KEY}.pub"
    if not private_path.exists():
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        private_pem, public_line = _generate(f"tpuops-{cluster}")
        # O_EXCL: two concurrent `up`s cannot both write (and one silently replace the other's key).
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(private_pem)
        public_path.write_text(public_line + "\n")
    os.chmod(private_path, 0o600)
    if not public_path.exists():
        public_path.write_text(_public_from_private(private_path) + "\n")
    return KeyPair(private_path=private_path, public_key=public_path.read_text().strip())


def ssh_keys_metadata(user: str, key: KeyPair) -> str:
    """The `ssh-keys` metadata value: USER:ssh-ed25519 AAAA... USER."""
    key_type, body = key.public_key.split()[:2]
    return f"{user}:{key_type} {body} {user}"


def pin_host_keys(directory: Path, keys: Iterable[PinnedKey]) -> Path:
    """Write `keys` into known_hosts, replacing older lines for the same host:port and keeping the rest."""
    path = directory / KNOWN_HOSTS
    keys = list(keys)
    replaced = {key.host_field for key in keys}
    kept = []
    if path.exists():
        kept = [line for line in path.read_text().splitlines() if line.strip() and line.split()[0] not in replaced]
    lines = kept + [key.line() for key in keys]
    write_atomic(path, "".join(line + "\n" for line in lines))
    return path


def forget_host_keys(directory: Path) -> None:
    (directory / KNOWN_HOSTS).unlink(missing_ok=True)


def _generate(comment: str) -> tuple[bytes, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return pem, f"{public.decode()} {comment}"


def _public_from_private(private_path: Path) -> str:
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_ssh_private_key(private_path.read_bytes(), password=None)
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return public.decode()
