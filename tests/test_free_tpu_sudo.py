"""free-tpu finds a TPU holder owned by another user (root) through `sudo -n`, and says when it cannot.

On a TPU VM the SSH user is not root but has passwordless sudo; a stale holder is often root's (a container, an
earlier `sudo python3 train.py`), whose /proc/PID/fd the SSH user cannot read. Here: a loopback sshd worker
that logs in as a throwaway non-root user, and a holder process started by this test as root. The user gets
a sudoers entry for one case and none for the other; both are removed afterwards.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.context import Context
from tpuops.ops.launch import LaunchOptions, launch_run, stop

pytestmark = pytest.mark.skipif(not sshd_available() or shutil.which("useradd") is None,
                                reason="needs root, OpenSSH sshd and useradd")
SPEC = """
name: {name}
zone: europe-west4-a
tpu: {{type: v3-8}}
code: {{path: code}}
trainer:
  framework: jax
  command: "true"
"""


@dataclass
class NonRootWorker:
    user: str
    home: Path
    sshd: SshdCluster


@pytest.fixture(scope="module")
def nonroot_worker() -> Iterator[NonRootWorker]:
    # Outside pytest's 0700 temp root: sshd reads authorized_keys as the user, who must reach it.
    base = Path(tempfile.mkdtemp(prefix="tpuops-sudo-"))
    base.chmod(0o755)
    user = f"tpuops-t{uuid.uuid4().hex[:8]}"
    sshd = SshdCluster(base / "sshd", 1)
    home = sshd.workers[0].home
    subprocess.run(["useradd", "-M", "-d", str(home), "-s", "/bin/sh", "-p", "*", user], check=True, timeout=30)
    try:
        shutil.chown(home, user, user)
        with sshd:
            yield NonRootWorker(user, home, sshd)
    finally:
        subprocess.run(["userdel", "-f", user], timeout=30, check=False)  # -f: even if a session lingers
        Path(f"/etc/sudoers.d/{user}").unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def root_holder(nonroot_worker: NonRootWorker, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen]:
    """A process of root holding the worker's "TPU device" open (a file in the user's home, by absolute path:
    the simulator's ~/ paths are never looked for as root)."""
    devices = nonroot_worker.home / "dev"
    devices.mkdir(exist_ok=True)
    device = devices / "accel0"
    device.touch()
    monkeypatch.setenv("TPUOPS_TPU_DEVICE_GLOB", f"{devices}/accel*")
    monkeypatch.setenv("TPUOPS_LIBTPU_LOCKFILE", str(nonroot_worker.home / "libtpu_lockfile"))
    holder = subprocess.Popen(["sh", "-c", 'exec 3<"$1"; exec sleep 300', "holder", str(device)],
                              start_new_session=True)
    try:
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=10)


def launch_lines(worker: NonRootWorker, home: Path, tmp_path: Path, name: str) -> tuple[bool, list[str]]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    worker.sshd.write_cluster(home, name, write_spec(tmp_path, SPEC.format(name=name)), pin=True, user=worker.user)
    lines: list[str] = []
    ctx = Context.from_env()
    report = launch_run(ctx, name, LaunchOptions(), on_line=lambda _w, _s, line: lines.append(line))
    stop(ctx, name)
    return report.ok, lines


def test_without_passwordless_sudo_it_says_what_it_could_not_check(
    nonroot_worker: NonRootWorker, root_holder: subprocess.Popen, tpuops_home: Path, tmp_path: Path
) -> None:
    ok, lines = launch_lines(nonroot_worker, tpuops_home, tmp_path, "nosudo")
    assert ok
    assert any(f"{nonroot_worker.user} has no passwordless sudo" in line for line in lines), lines
    assert root_holder.poll() is None  # not found, not stopped: and the user was told


@pytest.mark.skipif(shutil.which("sudo") is None, reason="needs sudo")
def test_with_passwordless_sudo_a_root_holder_is_stopped(
    nonroot_worker: NonRootWorker, root_holder: subprocess.Popen, tpuops_home: Path, tmp_path: Path
) -> None:
    sudoers = Path(f"/etc/sudoers.d/{nonroot_worker.user}")
    sudoers.write_text(f"{nonroot_worker.user} ALL=(ALL) NOPASSWD: ALL\n")
    sudoers.chmod(0o440)
    try:
        ok, lines = launch_lines(nonroot_worker, tpuops_home, tmp_path, "withsudo")
    finally:
        sudoers.unlink()
    assert ok
    assert any(f"pid {root_holder.pid} of root" in line and "holding" in line for line in lines), lines
    root_holder.wait(timeout=30)  # stopped by free-tpu (TERM to its process group)
