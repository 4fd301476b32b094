"""A local TensorBoard beside a mirror that keeps its directory current (`tpuops tensorboard`).

TensorBoard reads a local directory (never GCS with the user's credentials on every refresh); a thread syncs the
logdir into it every few seconds (`Mirror`: only the bytes appended since the last sync move). TensorBoard runs as
a child process in its own process group, so a Ctrl-C at the terminal reaches tpuops alone, which then stops the
loop and TensorBoard (TERM, then KILL after a grace period) and leaves no process behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from tpuops.errors import TpuopsError
from tpuops.logs.mirror import Mirror

STOP_GRACE_SECONDS = 10.0
READY_TIMEOUT = 120.0  # TensorBoard imports much at start, on a loaded machine it takes a while


class MirrorLoop:
    """`mirror.sync()` every `interval` seconds in a daemon thread until `stop()`; failures are warned, retried."""

    def __init__(self, mirror: Mirror, interval: float, warn: Callable[[str], None],
                 before_sync: Callable[[], None] | None = None) -> None:
        self.mirror, self.interval, self.warn = mirror, interval, warn
        self.before_sync = before_sync  # e.g. learn of runs launched since (their files go under their own ids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tpuops-tensorboard-mirror", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self.before_sync is not None:
                    self.before_sync()
                self.mirror.sync()
            except (TpuopsError, OSError) as err:
                self.warn(f"mirroring the logdir failed: {err}; retrying")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.interval + 30)


def port_taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def served_port(pid: int) -> int | None:
    """The port the TensorBoard process `pid` listens on, from the info file it writes once it serves (what
    `tensorboard.manager` reads for `%tensorboard` in notebooks); None until then."""
    from tensorboard import manager  # the TensorBoard tpuops starts is this interpreter's

    return next((info.port for info in manager.get_all() if info.pid == pid), None)


class Board:
    """One TensorBoard process over `logdir` on host:port (port 0: any free one, known once it serves)."""

    def __init__(self, logdir: Path, host: str, port: int, reload_seconds: int = 5) -> None:
        self.logdir, self.host, self.port, self.reload_seconds = logdir, host, port, reload_seconds
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = logdir.parent / f"{logdir.name}.tensorboard.log"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> None:
        argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(self.logdir), "--host", self.host,
                "--port", str(self.port), "--reload_interval", str(self.reload_seconds)]
        with open(self.log_path, "wb") as log:  # its chatter, for when it fails to start
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until it answers HTTP; TpuopsError (with the end of its log) when it exits or does not answer in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise TpuopsError(f"TensorBoard exited at start: {self._log_tail()}", f"see {self.log_path}")
            if self.port == 0:  # it chose the port: learnt from its info file once it serves
                self.port = served_port(self.process.pid) or 0
                if self.port == 0:
                    time.sleep(0.2)
                    continue
            try:
                with urllib.request.urlopen(self.url + "data/runs", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        raise TpuopsError(f"TensorBoard did not answer at {self.url} within {timeout:.0f} s", f"see {self.log_path}")

    def wait(self, poll: float = 0.5) -> int | None:
        """Until it exits (in short slices, so Ctrl-C lands at once); its exit code."""
        assert self.process is not None
        while True:
            with suppress(subprocess.TimeoutExpired):
                return self.process.wait(timeout=poll)

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, STOP_GRACE_SECONDS)):
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=wait)
                return

    def _log_tail(self) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "no output"
        return lines[-1] if lines else "no output"
