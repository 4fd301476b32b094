"""Capacity, preemption, interruption, lost state and foreign resources: `tpuops up/down` against the fakes."""

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
from tests.fakes.tpu_model import FakeNode
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec

WAIT_S = 60.0


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def v3_spec(tmp_path: Path, name: str, zone: str = "us-central1-a", extra: str = "") -> Path:
    return write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: {zone}
        tpu:
          type: v3-8
          runtime: tpu-vm-tf-2.16.1-pjrt
        {extra}
        """,
    )


def tpu_creates(gcp: FakeGcp) -> int:
    return len(gcp.tpu_v2.server.calls("POST", r"/nodes$"))


def test_no_capacity_fails_at_once_and_names_the_option(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("cap")
    gcp.tpu.capacity_failures["us-central1-a"] = -1
    result = run_cli("up", str(v3_spec(tmp_path, name)), env=gcp.env)
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert "no capacity for v3-8" in error and "There is no more capacity in the zone" in error
    assert "--wait-for-capacity" in error
    assert tpu_creates(gcp) == 1 and not gcp.tpu.nodes


def test_wait_for_capacity_retries_until_the_zone_has_room(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("wait")
    gcp.tpu.capacity_failures["us-central1-a"] = 2
    result = run_cli("up", str(v3_spec(tmp_path, name)), "--wait-for-capacity", "2m", "--json", env=gcp.env)
    assert result.returncode == 0, result.stderr
    assert tpu_creates(gcp) == 3
    assert gcp.tpu.nodes[("us-central1-a", name)].state == "READY"


def test_zone_fallback_lands_in_the_next_zone_and_the_vm_follows(
    gcp: FakeGcp, tmp_path: Path, tpuops_home: Path
) -> None:
    name = unique("fb")
    gcp.tpu.capacity_failures["us-central1-a"] = -1
    gcp.tpu.capacity_failures["us-central1-b"] = -1
    spec = v3_spec(
        tmp_path,
        name,
        extra="""  zones: [us-central1-b, us-central1-f]
        client_vm: {machine_type: n1-standard-2}""",
    )
    result = run_cli("up", str(spec), "--json", env=gcp.env)
    assert result.returncode == 0, result.stderr
    tried = [c.path.split("/locations/")[1].split("/")[0] for c in gcp.tpu_v2.server.calls("POST", r"/nodes$")]
    assert tried == ["us-central1-a", "us-central1-b", "us-central1-f"]
    assert list(gcp.tpu.nodes) == [("us-central1-f", name)]
    assert list(gcp.compute.instances) == [("us-central1-f", f"{name}-client")]
    state = json.loads((tpuops_home / "clusters" / name / "state.json").read_text())
    assert state["zone"] == "us-central1-f"

    gone = run_cli("down", name, "--yes", env=gcp.env)
    assert gone.returncode == 0, gone.stderr
    assert not gcp.tpu.nodes and not gcp.compute.instances


def test_preempted_tpu_is_deleted_and_created_again(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("pre")
    spec = v3_spec(tmp_path, name)
    assert run_cli("up", str(spec), env=gcp.env).returncode == 0
    gcp.tpu.preempt("us-central1-a", name)
    status = run_cli("status", name, "--json", env=gcp.env)
    assert json.loads(status.stdout)["tpu_state"] == "PREEMPTED"

    again = run_cli("up", str(spec), "--json", env=gcp.env)
    assert again.returncode == 0, again.stderr
    assert [(a["verb"], a["kind"]) for a in json.loads(again.stdout)["created"]] == [("recreate", "tpu")]
    assert len(gcp.tpu_v2.server.calls("DELETE", rf"/nodes/{name}$")) == 1
    assert tpu_creates(gcp) == 2
    assert gcp.tpu.nodes[("us-central1-a", name)].state == "READY"


def test_interrupted_up_resumes_without_creating_twice_then_down_cleans(
    gcp: FakeGcp, tmp_path: Path, tpuops_home: Path
) -> None:
    name, bucket = unique("int"), unique("tpuops-b")
    gcp.tpu.create_seconds = 3.0  # the TPU takes a while: Ctrl-C lands while it is being created
    spec = v3_spec(
        tmp_path,
        name,
        extra=f"""bucket: {{name: {bucket}}}
        client_vm: {{machine_type: n1-standard-2}}""",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "tpuops", "up", str(spec)],
        env={**os.environ, **gcp.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Interrupt once the TPU's create reached the API (its state was recorded before that).
        wait_for(lambda: ("us-central1-a", name) in gcp.tpu.nodes, "the TPU's create to reach the API")
        assert recorded_status(tpuops_home, name, "tpu") == "creating"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=WAIT_S)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "tpuops up" in stderr

    resumed = run_cli("up", str(spec), "--json", env=gcp.env)
    assert resumed.returncode == 0, resumed.stderr
    assert tpu_creates(gcp) == 1  # adopted, not created twice
    assert "tpu" in [a["kind"] for a in json.loads(resumed.stdout)["kept"]]
    assert gcp.tpu.nodes[("us-central1-a", name)].state == "READY"

    gone = run_cli("down", name, "--yes", "--delete-bucket", env=gcp.env)
    assert gone.returncode == 0, gone.stderr
    assert not gcp.tpu.nodes and not gcp.compute.instances
    assert gcp.storage().lookup_bucket(bucket) is None


def test_down_without_state_finds_resources_by_label(gcp: FakeGcp, tmp_path: Path, tpuops_home: Path) -> None:
    name = unique("lost")
    spec = v3_spec(tmp_path, name, extra="client_vm: {machine_type: n1-standard-2}")
    assert run_cli("up", str(spec), env=gcp.env).returncode == 0
    (tpuops_home / "clusters" / name / "state.json").unlink()

    by_spec = run_cli("down", str(spec), "--yes", "--json", env=gcp.env)  # the spec's zones, by label
    assert by_spec.returncode == 0, by_spec.stderr
    assert sorted(d["kind"] for d in json.loads(by_spec.stdout)["deleted"]) == ["client_vm", "tpu"]
    assert not gcp.tpu.nodes and not gcp.compute.instances

    again = run_cli("down", str(spec), "--yes", env=gcp.env)
    assert again.returncode == 0 and "nothing was left to delete (searched zone(s) " in again.stdout


def test_down_by_name_without_state_searches_every_zone(gcp: FakeGcp, tmp_path: Path, tpuops_home: Path) -> None:
    name = unique("lost")
    spec = v3_spec(tmp_path, name, extra="client_vm: {machine_type: n1-standard-2}")
    assert run_cli("up", str(spec), env=gcp.env).returncode == 0
    (tpuops_home / "clusters" / name / "state.json").unlink()

    by_name = run_cli("down", name, "--yes", "--json", env=gcp.env)  # was "nothing was left", the TPU still up
    assert by_name.returncode == 0, by_name.stderr
    assert sorted(d["kind"] for d in json.loads(by_name.stdout)["deleted"]) == ["client_vm", "tpu"]
    assert not gcp.tpu.nodes and not gcp.compute.instances


def test_a_resource_without_our_label_is_never_touched(gcp: FakeGcp, tmp_path: Path) -> None:
    name, bucket = unique("foreign"), unique("tpuops-b")
    gcp.tpu.nodes[("us-central1-a", name)] = FakeNode(
        name=name,
        zone="us-central1-a",
        accelerator_type="v3-8",
        runtime="x",
        mode="vm",
        state="READY",
        labels={"owner": "someone-else"},
    )
    spec = v3_spec(tmp_path, name, extra=f"bucket: {{name: {bucket}}}")
    result = run_cli("up", str(spec), env=gcp.env)
    assert result.returncode == 1
    assert "does not carry the label tpuops-cluster=" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # Refused before anything was created.
    assert tpu_creates(gcp) == 0 and not gcp.gcs.calls("POST", r"/storage/v1/b$")

    down = run_cli("down", str(spec), "--yes", "--json", env=gcp.env)
    assert down.returncode == 0, down.stderr
    report = json.loads(down.stdout)
    assert report["deleted"] == [] and any(name in item for item in report["left_alone"])
    assert not gcp.tpu_v2.server.calls("DELETE", r"/nodes/")
    assert ("us-central1-a", name) in gcp.tpu.nodes


def recorded_status(home: Path, name: str, kind: str) -> str | None:
    try:
        state = json.loads((home / "clusters" / name / "state.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return next((r["status"] for r in state["resources"] if r["kind"] == kind), None)


def wait_for(condition, what: str, timeout: float = WAIT_S) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
