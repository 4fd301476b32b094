"""A real Cloud Storage endpoint for tests: `gcp-storage-emulator`, in memory, on a free loopback port.

Use it from a test module with

    from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)

and point code at it through `gcs_emulator.env` (STORAGE_EMULATOR_HOST, a project), the same way a user
would point tpuops at a private endpoint. The emulator runs as a subprocess for the whole test session
and is stopped at the end; every wait is bounded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

EMULATOR_PROJECT = "tpuops-test"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    """A port nobody listens on right now (the OS picks it; the tiny race is acceptable in tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class GcsEmulator:
    """A running emulator: its base URL, the environment pointing clients at it, helpers for buckets."""

    host: str
    process: subprocess.Popen[bytes]
    env: dict[str, str] = field(default_factory=dict)

    def client(self):  # -> google.cloud.storage.Client
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=EMULATOR_PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.host},
        )

    def new_bucket(self, prefix: str = "tpuops-test") -> str:
        """Create a bucket with a unique name (tests share one emulator) and return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(name)
        return name


def _wait_until_up(host: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gcp-storage-emulator exited early with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{host}/storage/v1/b?project={EMULATOR_PROJECT}", timeout=2):
                return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    raise TimeoutError(f"gcp-storage-emulator did not answer on {host} within {timeout:.0f}s")


def start_emulator() -> GcsEmulator:
    port = free_port()
    host = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
         "--in-memory", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        _wait_until_up(host, process, START_TIMEOUT_S)
    except BaseException:
        stop_emulator(process)
        raise
    env = {"STORAGE_EMULATOR_HOST": host, "GOOGLE_CLOUD_PROJECT": EMULATOR_PROJECT}
    return GcsEmulator(host=host, process=process, env=env)


def stop_emulator(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    emulator = start_emulator()
    try:
        yield emulator
    finally:
        stop_emulator(emulator.process)
