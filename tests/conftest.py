"""Suite-wide guards: loopback-only networking (here and in every Python subprocess), no credentials,
and a private TPUOPS_HOME per test."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

NETGUARD = Path(__file__).parent / "netguard"
sys.path.insert(0, str(NETGUARD))
import tests_netguard_impl  # noqa: E402,F401  installs the guard in the test process

# The lint's corpus holds trainers (some with a tests/ of their own) to be read, never run by pytest.
collect_ignore_glob = ["check_corpus/*"]

# Subprocesses (the CLI run as users run it) load the same guard through sitecustomize.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(NETGUARD), os.environ.get("PYTHONPATH")]))
# No Google credentials or gcloud config may leak into the suite.
for _name in ("GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CORE_PROJECT", "GOOGLE_CLOUD_PROJECT"):
    os.environ.pop(_name, None)
os.environ["CLOUDSDK_CONFIG"] = "/nonexistent-gcloud-config"
os.environ["NO_GCE_CHECK"] = "true"  # google-auth must not probe the metadata server
os.environ["TPUOPS_WATCHDOG_INSTALL"] = "0"  # launch must not `pip install py-spy` on loopback workers (PyPI)
# Nor ship run output to storage.googleapis.com from loopback workers (tests that keep output turn it on).
os.environ["TPUOPS_KEEP_OUTPUT"] = "0"
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a CUDA build of torch/jax/tf stays on the CPU, GPU or not


@pytest.fixture(autouse=True)
def tpuops_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("tpuops-home")
    monkeypatch.setenv("TPUOPS_HOME", str(home))
    return home


@pytest.fixture
def tpu_paths_in_worker_homes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback workers share this machine's /dev and /tmp: keep their "TPU devices" and libtpu lock file in
    their own homes (a leading ~/ is the worker's home)."""
    monkeypatch.setenv("TPUOPS_TPU_DEVICE_GLOB", "~/dev/accel*")
    monkeypatch.setenv("TPUOPS_LIBTPU_LOCKFILE", "~/libtpu_lockfile")


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port where connections are refused for the whole test: bound but not listening, so no other
    test's server can take it meanwhile (a port found free and given back can be)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
