"""`tpuops up/status/down` on GCP, run as a subprocess against the wire-level fakes."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec

ZONE = "europe-west4-a"
DEFAULT_SA = "serviceAccount:123456789012-compute@developer.gserviceaccount.com"


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def tpu_vm_spec(tmp_path: Path, name: str, bucket: str, extra: str = "", tpu_type: str = "v3-8") -> Path:
    return write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: {ZONE}
        tpu:
          type: {tpu_type}
          runtime: tpu-vm-tf-2.16.1-pjrt
        {extra}
        bucket:
          name: {bucket}
        ssh:
          user: trainer
          port: 2222
        """,
    )


def up(spec: Path, fake: FakeGcp, *args: str):
    return run_cli("up", str(spec), "--json", *args, env=fake.env, timeout=90)


def test_tpu_vm_up_creates_bucket_grant_tpu_and_records_workers(gcp: FakeGcp, tmp_path: Path,
                                                                 tpuops_home: Path) -> None:
    name, bucket = unique("vm"), unique("tpuops-b")
    result = up(tpu_vm_spec(tmp_path, name, bucket), gcp)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert sorted(a["kind"] for a in report["created"]) == ["bucket", "iam", "tpu"]

    # The bucket: in the TPU's region, uniform access, labelled; objectAdmin for the default SA on it only.
    created = gcp.storage().get_bucket(bucket)
    assert created.location == "EUROPE-WEST4"
    assert created.iam_configuration.uniform_bucket_level_access_enabled
    assert created.labels == {"tpuops-cluster": name}
    policy = gcp.storage().bucket(bucket).get_iam_policy(requested_policy_version=3)
    assert [(b["role"], sorted(b["members"])) for b in policy.bindings] == [
        ("roles/storage.objectAdmin", [DEFAULT_SA])
    ]
    # The TPU: asked for with external IPs, our label and the cluster's public key for the ssh user.
    node = gcp.tpu.nodes[(ZONE, name)]
    assert node.external_ips and node.labels == {"tpuops-cluster": name}
    public_key = (tpuops_home / "clusters" / name / "id_ed25519.pub").read_text().split()
    assert node.metadata["ssh-keys"] == f"trainer:{public_key[0]} {public_key[1]} trainer"
    private = tpuops_home / "clusters" / name / "id_ed25519"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600

    # Workers recorded with the ssh port; host keys pinned in OpenSSH format.
    state_text = (tpuops_home / "clusters" / name / "state.json").read_text()
    assert "PRIVATE KEY" not in state_text and private.read_text().split("\n")[1] not in state_text
    state = json.loads(state_text)
    assert [(w["index"], w["internal_ip"], w["ssh_host"], w["ssh_port"]) for w in state["workers"]] == [
        (0, "10.130.0.2", "127.0.0.10", 2222)
    ]
    known_hosts = (tpuops_home / "clusters" / name / "known_hosts").read_text().splitlines()
    key_type, key = gcp.tpu.host_keys(name, 0)[0]
    assert known_hosts == [f"[127.0.0.10]:2222 {key_type} {key}"]
    # The system OpenSSH's block for the worker, kept by up (and removed by down, below).
    ssh_block = (tpuops_home / "ssh" / f"{name}.conf").read_text()
    assert f"Host tpuops-{name}-w0\n    HostName 127.0.0.10\n    Port 2222\n    User trainer\n" in ssh_block

    # status shows the live state; down deletes the TPU and keeps the bucket.
    shown = run_cli("status", name, "--json", env=gcp.env)
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["tpu_state"] == "READY" and status["tpu_health"] == "HEALTHY"
    assert {r["kind"]: r["state"] for r in status["resources"]} == {
        "bucket": "EXISTS", "iam": "GRANTED", "tpu": "READY"
    }
    listed = run_cli("status", "--json", env=gcp.env)
    assert [c["name"] for c in json.loads(listed.stdout)] == [name]

    gone = run_cli("down", name, "--yes", "--json", env=gcp.env)
    assert gone.returncode == 0, gone.stderr
    assert [d["kind"] for d in json.loads(gone.stdout)["deleted"]] == ["tpu"]
    cost = json.loads(gone.stdout)["cost"]  # what it cost in all: hours held x the list price of its type
    assert cost["per_hour"] > 0 and cost["dollars"] == pytest.approx(
        cost["per_hour"] * cost["uptime_seconds"] / 3600, abs=0.01)
    assert (ZONE, name) not in gcp.tpu.nodes
    assert gcp.storage().lookup_bucket(bucket) is not None
    assert not (tpuops_home / "ssh" / f"{name}.conf").exists()

    again = run_cli("down", name, "--yes", env=gcp.env)
    assert again.returncode == 0, again.stderr
    assert "nothing was left to delete" in again.stdout


def test_second_up_creates_nothing(gcp: FakeGcp, tmp_path: Path) -> None:
    name, bucket = unique("re"), unique("tpuops-b")
    spec = tpu_vm_spec(tmp_path, name, bucket)
    assert up(spec, gcp).returncode == 0
    creates_before = len(gcp.tpu_v2.server.calls("POST", r"/nodes$"))
    again = up(spec, gcp)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["created"] == []
    assert sorted(a["kind"] for a in report["kept"]) == ["bucket", "iam", "tpu"]
    assert len(gcp.tpu_v2.server.calls("POST", r"/nodes$")) == creates_before
    assert gcp.gcs.calls("POST", r"/storage/v1/b$") and len(gcp.gcs.calls("PUT", r"/iam$")) == 1
    human = run_cli("up", str(spec), env=gcp.env)
    assert "nothing to do" in human.stdout


@pytest.mark.parametrize("status", [429, 503])
def test_transient_errors_are_retried(gcp: FakeGcp, tmp_path: Path, status: int) -> None:
    name, bucket = unique("tr"), unique("tpuops-b")
    gcp.tpu_v2.server.faults.http_error("POST", r"/nodes$", status, times=2)
    gcp.tpu_v2.server.faults.http_error("GET", r"/operations/", status, times=1)
    gcp.gcs.faults.http_error("POST", r"/storage/v1/b$", status, times=1)
    result = up(tpu_vm_spec(tmp_path, name, bucket), gcp)
    assert result.returncode == 0, result.stderr
    assert len(gcp.tpu_v2.server.calls("POST", r"/nodes$")) == 3
    assert gcp.tpu.nodes[(ZONE, name)].state == "READY"


def test_an_operation_failing_unavailable_creates_again(gcp: FakeGcp, tmp_path: Path) -> None:
    name, bucket = unique("op"), unique("tpuops-b")
    gcp.tpu.transient_failures[ZONE] = 1
    result = up(tpu_vm_spec(tmp_path, name, bucket), gcp)
    assert result.returncode == 0, result.stderr
    assert len(gcp.tpu_v2.server.calls("POST", r"/nodes$")) == 2
    assert gcp.tpu.nodes[(ZONE, name)].state == "READY"


def test_permission_denied_is_not_retried_and_says_so(gcp: FakeGcp, tmp_path: Path) -> None:
    name, bucket = unique("pd"), unique("tpuops-b")
    gcp.tpu_v2.server.faults.http_error(
        "POST", r"/nodes$", 403, message="Cloud TPU API has not been used in project 1 before or it is disabled"
    )
    result = up(tpu_vm_spec(tmp_path, name, bucket), gcp)
    assert result.returncode == 1
    assert len(gcp.tpu_v2.server.calls("POST", r"/nodes$")) == 1
    assert "tpu.googleapis.com API is not enabled" in result.stderr
    assert "gcloud services enable tpu.googleapis.com" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
