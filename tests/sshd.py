"""Real OpenSSH sshd processes on loopback, one per simulated worker, key-only auth.

Like a TPU pod slice, all workers listen on the same port, each on its own address (127.A.B.10+i, with A.B
random so concurrent test runs do not collide). Each worker gets its own home: its sshd runs in a private
mount namespace (`unshare -m`, we are root) with the worker's directory bound over /root, so pushes to
"different hosts" land in different trees. Where namespaces are not allowed, sshd's `SetEnv HOME` gives
the same effect for everything tpuops does (it always addresses `~`/$HOME, never the login directory).

Every sshd started is stopped by `close()` (the fixtures call it), and every wait is bounded.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.fakes.cloud import FakeGcp

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
START_TIMEOUT = 10.0


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


USE_NAMESPACES = _can_unshare()


def worker_python() -> Path | None:
    """An interpreter the workers can run, to make a worker's venv from: the one the suite runs on (its base), unless
    it lives under /root, which a worker's namespace covers with the worker's home; else the system's python3."""
    for candidate in (Path(sys.base_prefix) / "bin" / "python3", Path("/usr/bin/python3")):
        found = candidate.resolve()
        if found.is_file() and not (USE_NAMESPACES and found.is_relative_to("/root")):
            return found
    return None


def sshd_available() -> bool:
    return Path(SSHD).exists() and os.geteuid() == 0


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True,
                   timeout=20)


def free_port() -> int:
    """A port free on every loopback address at this moment (bound on the wildcard address)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


@dataclass
class SshdWorker:
    index: int
    host: str
    port: int
    root: Path
    process: subprocess.Popen | None = None

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    def published_key(self) -> tuple[str, str]:
        """Its host key as a TPU or VM publishes it (guest attributes): (type, base64), read now (a test may
        replace the key)."""
        kind, b64 = (self.host_key.with_suffix(".pub").read_text().split() + [""])[:2]
        return kind, b64

    def host_key_line(self) -> str:
        kind, b64 = self.published_key()
        return f"[{self.host}]:{self.port} {kind} {b64}"


def tpus_answer_at(fake_gcp: FakeGcp, worker_of: Callable[[str, int], SshdWorker]) -> FakeGcp:
    """Host `index` of every TPU node the fakes create (again) is the sshd worker `worker_of(node, index)`: its
    address, internal and external, and its real host key, read when the node is described."""
    fake_gcp.tpu.external_ip = lambda zone, name, index: worker_of(name, index).host
    fake_gcp.tpu.internal_ip = lambda zone, name, index: worker_of(name, index).host
    fake_gcp.tpu.host_keys = lambda name, index: [worker_of(name, index).published_key()]
    return fake_gcp


@dataclass
class SshdCluster:
    """N sshd workers sharing one port, a client key authorised on all of them."""

    root: Path
    count: int
    workers: list[SshdWorker] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # what every session's environment already has (SetEnv)
    worker_env: dict[int, dict[str, str]] = field(default_factory=dict)  # the same for one worker (by index)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation directory
        self.client_key = self.root / "id_ed25519"
        keygen(self.client_key)
        (self.root / "authorized_keys").write_text(self.client_key.with_suffix(".pub").read_text())
        self.port = free_port()
        net = f"127.{random.randint(20, 250)}.{random.randint(1, 250)}"
        for index in range(self.count):
            worker = SshdWorker(index, f"{net}.{10 + index}", self.port, self.root / f"w{index}")
            worker.home.mkdir(parents=True)
            keygen(worker.host_key)
            self.workers.append(worker)

    # -------------------------------------------------------------------------------------- lifecycle

    def start_all(self) -> SshdCluster:
        for worker in self.workers:
            self._spawn(worker)
        for worker in self.workers:
            self._wait_listening(worker)
        return self

    def start(self, index: int) -> None:
        worker = self.workers[index]
        self._spawn(worker)
        self._wait_listening(worker)

    def stop(self, index: int) -> None:
        worker = self.workers[index]
        if worker.process is not None:
            worker.process.terminate()
            try:
                worker.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(timeout=5)
            worker.process = None

    def close(self) -> None:
        for worker in self.workers:
            self.stop(worker.index)

    def __enter__(self) -> SshdCluster:
        try:
            return self.start_all()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def new_host_key(self, index: int) -> None:
        """Give a worker a new host key (as a re-created VM would have); restart its sshd if running."""
        worker = self.workers[index]
        running = worker.process is not None
        self.stop(index)
        worker.host_key.unlink()
        worker.host_key.with_suffix(".pub").unlink()
        keygen(worker.host_key)
        if running:
            self.start(index)

    def _config(self, worker: SshdWorker) -> Path:
        lines = [
            f"ListenAddress {worker.host}:{worker.port}",
            f"HostKey {worker.host_key}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes no",
            "PidFile none",
            "LogLevel ERROR",
            "MaxStartups 200",
            "MaxSessions 100",
            "AllowTcpForwarding yes",
            "Subsystem sftp internal-sftp",
        ]
        env = {**self.env, **self.worker_env.get(worker.index, {})}
        env = env if USE_NAMESPACES else {**env, "HOME": str(worker.home)}
        if env:
            lines.append("SetEnv " + " ".join(f"{name}={value}" for name, value in env.items()))
        path = worker.root / "sshd_config"
        path.write_text("\n".join(lines) + "\n")
        return path

    def _spawn(self, worker: SshdWorker) -> None:
        config = self._config(worker)
        sshd = [SSHD, "-D", "-e", "-f", str(config)]
        if USE_NAMESPACES:
            script = 'mount --bind "$1" /root && shift && exec "$@"'
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(worker.home), *sshd]
        else:
            argv = sshd
        log = open(worker.root / "sshd.log", "ab")  # noqa: SIM115  closed with the process
        worker.process = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def _wait_listening(self, worker: SshdWorker) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if worker.process is not None and worker.process.poll() is not None:
                log = (worker.root / "sshd.log").read_text(errors="replace")
                raise RuntimeError(f"sshd for w{worker.index} exited: {log[-500:]}")
            try:
                with socket.create_connection((worker.host, worker.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd for w{worker.index} did not listen within {START_TIMEOUT} s")

    # ---------------------------------------------------------------------------------------- tpuops

    def write_cluster(self, tpuops_home: Path, name: str, spec_path: Path, *, pin: bool = False,
                      user: str = "root") -> Path:
        """Write what `up` leaves behind: state.json with the workers, the key pair, optionally known_hosts."""
        cluster_dir = tpuops_home / "clusters" / name
        cluster_dir.mkdir(parents=True, exist_ok=True)
        key = cluster_dir / "id_ed25519"
        shutil.copy(self.client_key, key)
        shutil.copy(self.client_key.with_suffix(".pub"), key.with_suffix(".pub"))
        key.chmod(0o600)
        if pin:
            (cluster_dir / "known_hosts").write_text("".join(w.host_key_line() + "\n" for w in self.workers))
        state = {
            "name": name,
            "provider": "gcp",
            "project": "test-project",
            "zone": "europe-west4-a",
            "spec_path": str(spec_path),
            "ssh_user": user,
            "workers": [
                {"index": w.index, "internal_ip": w.host, "external_ip": w.host, "ssh_host": w.host,
                 "ssh_port": w.port}
                for w in self.workers
            ],
        }
        (cluster_dir / "state.json").write_text(json.dumps(state, indent=2))
        return cluster_dir
