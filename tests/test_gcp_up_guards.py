"""`tpuops up` asks the zone before creating anything, and never leaves a queued resource waiting behind it:
the CLI as a subprocess, the real Google clients against the wire fakes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.tpu_model import ZoneListing
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import assert_clean_exit, interrupt, run_cli, write_spec

ZONE = "us-central2-b"
WAIT = 30.0


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def vm_spec(tmp_path: Path, name: str, tpu: str, zone: str = ZONE) -> Path:
    return write_spec(tmp_path, f"""
        name: {name}
        zone: {zone}
        tpu: {{{tpu}}}
        bucket: {{name: {name}-b}}
        """)


def nothing_created(gcp: FakeGcp, name: str) -> bool:
    return (not gcp.tpu.nodes and not gcp.tpu.queued and not gcp.compute.instances
            and gcp.storage().lookup_bucket(f"{name}-b") is None)


# ------------------------------------------------------------------------------------ the zone decides
def test_a_runtime_the_zone_does_not_list_creates_nothing(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("rt")
    gcp.tpu.listings[ZONE] = ZoneListing(["v4-8"], ["tpu-ubuntu2204-base", "tpu-vm-v4-base"], [], [])
    result = run_cli("up", str(vm_spec(tmp_path, name, "type: v4-8, runtime: tpu-vm-v4-pt-2.0")), env=gcp.env)

    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert f"zone {ZONE} does not offer runtime tpu-vm-v4-pt-2.0" in line and "tpu-vm-v4-base" in line
    assert nothing_created(gcp, name)
    assert not gcp.tpu_v2.server.calls("POST", r"/nodes$")


def test_a_legacy_node_version_is_asked_of_tpu_v1(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("nv")
    zone = "europe-west4-a"
    gcp.tpu.listings[zone] = ZoneListing(["v3-8"], [], ["v3-8"], ["2.12.0", "pytorch-1.13"])
    spec = write_spec(tmp_path, f"""
        name: {name}
        zone: {zone}
        tpu: {{type: v3-8, mode: node, runtime: "pytorch-1.8"}}
        client_vm: {{machine_type: n1-standard-2}}
        bucket: {{name: {name}-b}}
        """)
    result = run_cli("up", str(spec), env=gcp.env)

    assert result.returncode == 2, result.stderr
    assert "does not offer legacy TPU Node version pytorch-1.8" in result.stderr and "pytorch-1.13" in result.stderr
    assert "ListTensorFlowVersions" in [call[0] for call in gcp.tpu_v1.calls]
    assert nothing_created(gcp, name)


def test_a_listing_that_is_refused_is_a_warning_and_up_goes_on(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("lw")
    gcp.tpu_v2.server.faults.http_error("GET", r"/acceleratorTypes$", 403, times=-1)
    result = run_cli("up", str(vm_spec(tmp_path, name, "type: v4-8, runtime: tpu-ubuntu2204-base")), "--json",
                     env=gcp.env)

    assert result.returncode == 0, result.stderr
    warnings = json.loads(result.stdout)["warnings"]
    assert any(f"could not ask zone {ZONE}" in w and "the create call will tell" in w for w in warnings), warnings
    assert gcp.tpu.nodes[(ZONE, name)].state == "READY"


def test_an_existing_tpu_is_not_asked_about_again(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("ka")
    spec = vm_spec(tmp_path, name, "type: v4-8, runtime: tpu-ubuntu2204-base")
    assert run_cli("up", str(spec), env=gcp.env).returncode == 0
    asked = len(gcp.tpu_v2.server.calls("GET", r"/runtimeVersions$"))
    assert asked >= 1
    assert run_cli("up", str(spec), env=gcp.env).returncode == 0
    assert len(gcp.tpu_v2.server.calls("GET", r"/runtimeVersions$")) == asked


# ------------------------------------------------------------------------- queued resources and the wait
QUEUED = "type: v4-8, runtime: tpu-ubuntu2204-base, queued: true, spot: true"


def test_the_queued_request_is_valid_only_for_the_wait(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("vu")
    result = run_cli("up", str(vm_spec(tmp_path, name, QUEUED)), "--wait-for-capacity", "2h", env=gcp.env)
    assert result.returncode == 0, result.stderr
    [created] = gcp.tpu_v2.server.calls("POST", r"/queuedResources$")
    assert created.body["queueingPolicy"] == {"validUntilDuration": "7200s"}


def test_a_wait_that_runs_out_leaves_no_queued_resource(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("to")
    gcp.tpu.queued_seconds = 600  # never granted within the test
    result = run_cli("up", str(vm_spec(tmp_path, name, QUEUED)), "--wait-for-capacity", "2s", env=gcp.env,
                     timeout=90)

    assert result.returncode == 1, result.stderr
    assert "no capacity for v4-8" in result.stderr
    posts = gcp.tpu_v2.server.calls("POST", r"/queuedResources$")
    assert posts and all(p.body["queueingPolicy"] == {"validUntilDuration": "2s"} for p in posts)
    assert not gcp.tpu.queued  # each expired request was deleted, none is left to be granted later
    assert gcp.tpu_v2.server.calls("DELETE", r"/queuedResources/")


def up_waiting_for_capacity(gcp: FakeGcp, tmp_path: Path, name: str, command: str = "up") -> subprocess.Popen[str]:
    """`tpuops up` (or `run`) of a queued spec, returned once its request waits (never granted in the test)."""
    gcp.tpu.queued_seconds = 600
    process = subprocess.Popen([sys.executable, "-m", "tpuops", command, str(vm_spec(tmp_path, name, QUEUED))],
                               env={**os.environ, **gcp.env}, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + WAIT
    while (ZONE, f"{name}-qr") not in gcp.tpu.queued or not gcp.tpu_v2.server.calls("GET", rf"/{name}-qr$"):
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise AssertionError(f"the queued resource was never created: {process.communicate()}")
        time.sleep(0.05)
    return process


def test_ctrl_c_while_waiting_for_capacity_withdraws_the_request(gcp: FakeGcp, tmp_path: Path,
                                                                 tpuops_home: Path) -> None:
    name = unique("cc")
    process = up_waiting_for_capacity(gcp, tmp_path, name)
    _, stderr = interrupt(process, timeout=WAIT)

    assert process.returncode == 130, stderr
    assert f"withdrew queued resource {name}-qr in {ZONE}" in stderr, stderr
    assert_clean_exit(stderr)
    assert not gcp.tpu.queued
    status = run_cli("status", name, "--json", env=gcp.env)
    assert status.returncode == 0, status.stderr
    assert "WAITING" not in status.stdout and "ACCEPTED" not in status.stdout


def test_ctrl_c_during_run_while_waiting_withdraws_the_request_too(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("rc")
    process = up_waiting_for_capacity(gcp, tmp_path, name, command="run")
    _, stderr = interrupt(process, timeout=WAIT)

    assert process.returncode == 130, stderr
    assert f"withdrew queued resource {name}-qr in {ZONE}" in stderr, stderr
    assert_clean_exit(stderr)
    assert not gcp.tpu.queued


def test_status_shows_how_long_a_queued_resource_has_waited(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("st")
    process = up_waiting_for_capacity(gcp, tmp_path, name)
    try:
        time.sleep(1.1)
        status = run_cli("status", name, env=gcp.env)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
    assert status.returncode == 0, status.stderr
    [row] = [line for line in status.stdout.splitlines() if f"{name}-qr" in line]
    assert "ACCEPTED" in row and "waiting for" in row, status.stdout
