"""The guard on this machine: `tpuops watch NAME --headless` as a detached process (its own session, so it
outlives the command that started it and a closed terminal), with its pid file and log under
`TPUOPS_HOME/local/guards/NAME/`. What a guard VM is on Google Cloud, without a VM."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from tpuops.providers.guard_host import HOLDER_ENV, GuardHostInfo, GuardPlacement

STOP_GRACE_S = 10.0


class LocalGuardHost:
    def __init__(self, env: Mapping[str, str], root: Path) -> None:
        self.env = env
        self.root = root  # TPUOPS_HOME/local

    def directory(self, cluster: str) -> Path:
        return self.root / "guards" / cluster

    def log_path(self, cluster: str) -> Path:
        return self.directory(cluster) / "guard.log"

    def bundle_home(self) -> None:
        return None  # the process reads this machine's TPUOPS_HOME: nothing to stage

    def check(self, placement: GuardPlacement) -> None:
        return None  # a process on this machine reads the workers as every command here does

    def ensure(self, placement: GuardPlacement, bundle_prefix: str) -> GuardHostInfo:
        """Adopt the guard process that runs, or start one. The process reads the cluster's state and spec
        from this machine at every poll, so a changed spec or code needs no refresh (`bundle_prefix`, where a VM
        gets them, is not used here)."""
        cluster = placement.cluster
        with self._locked(cluster):  # two `guard up` at once: one guard
            running = self.describe(cluster)
            if running is not None and running.state == "running":
                return running
            return self._start(cluster)

    def describe(self, cluster: str) -> GuardHostInfo | None:
        pid = self._pid(cluster)
        if pid is None:
            return None
        log = str(self.log_path(cluster))
        if is_guard_process(pid, cluster):
            return GuardHostInfo("process", f"pid {pid}", None, "running", detail=f"log {log}")
        return GuardHostInfo("process", f"pid {pid}", None, "stopped", detail=f"not running; log {log}")

    def delete(self, cluster: str) -> bool:
        pid = self._pid(cluster)
        if pid is None:
            return False
        with self._locked(cluster):
            if is_guard_process(pid, cluster):
                stop_process_group(pid)
        shutil.rmtree(self.directory(cluster), ignore_errors=True)  # its events stay in the ledger
        return True

    # ------------------------------------------------------------------------------------------ parts
    def _start(self, cluster: str) -> GuardHostInfo:
        directory = self.directory(cluster)
        env = {**self.env, "TPUOPS_HOME": str(self.root.parent), "PYTHONUNBUFFERED": "1"}
        env.setdefault(HOLDER_ENV, f"guard@{socket.gethostname()}")
        with open(self.log_path(cluster), "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tpuops", "watch", cluster, "--headless"], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, cwd=directory, env=env, start_new_session=True)
        (directory / "guard.pid").write_text(str(process.pid))
        return GuardHostInfo("process", f"pid {process.pid}", None, "running",
                             detail=f"log {self.log_path(cluster)}")

    def _pid(self, cluster: str) -> int | None:
        try:
            return int((self.directory(cluster) / "guard.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    @contextlib.contextmanager
    def _locked(self, cluster: str) -> Iterator[None]:
        directory = self.directory(cluster)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def is_guard_process(pid: int, cluster: str) -> bool:
    """The pid runs `tpuops watch CLUSTER --headless` (a pid file outlives its process; pids are reused)."""
    try:
        argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        state = (Path("/proc") / str(pid) / "stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z" and b"--headless" in argv and cluster.encode() in argv and b"watch" in argv


def stop_process_group(pid: int, grace: float = STOP_GRACE_S) -> None:
    """TERM the guard's session (it releases its lease on the way out), then KILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our own child (tests): reap it, or it stays a zombie
            if not _alive(pid):
                return
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False
