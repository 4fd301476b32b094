"""Pod slices, queued resources and legacy TPU Nodes with their client VM, through `tpuops up/down`."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec

NODE_AGENT = "service-123456789012@cloud-tpu.iam.gserviceaccount.com"


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def state_of(home: Path, name: str) -> dict:
    return json.loads((home / "clusters" / name / "state.json").read_text())


def test_pod_slice_records_every_host_and_pins_each_key(gcp: FakeGcp, tmp_path: Path, tpuops_home: Path) -> None:
    name, bucket = unique("pod"), unique("tpuops-b")
    spec = write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: us-central2-b
        tpu: {{type: v4-32, runtime: tpu-ubuntu2204-base, spot: true,
              service_account: trainer@p.iam.gserviceaccount.com}}
        bucket: {{name: {bucket}}}
        """,
    )
    result = run_cli("up", str(spec), "--json", env=gcp.env)
    assert result.returncode == 0, result.stderr
    node = gcp.tpu.nodes[("us-central2-b", name)]
    assert (node.accelerator_type, node.spot, node.preemptible) == ("v4-32", True, False)
    workers = state_of(tpuops_home, name)["workers"]
    assert [(w["index"], w["ssh_host"], w["ssh_port"]) for w in workers] == [
        (i, f"127.0.0.{10 + i}", 22) for i in range(4)
    ]
    known_hosts = (tpuops_home / "clusters" / name / "known_hosts").read_text().splitlines()
    assert known_hosts == [f"127.0.0.{10 + i} {' '.join(gcp.tpu.host_keys(name, i)[0])}" for i in range(4)]
    # The TPU VM runs as the spec's service account: that one, and only that one, gets the bucket.
    policy = gcp.storage().bucket(bucket).get_iam_policy(requested_policy_version=3)
    assert [(b["role"], sorted(b["members"])) for b in policy.bindings] == [
        ("roles/storage.objectAdmin", ["serviceAccount:trainer@p.iam.gserviceaccount.com"])
    ]
    assert gcp.storage().get_bucket(bucket).location == "US-CENTRAL2"


def test_queued_resource_up_then_down_with_force(gcp: FakeGcp, tmp_path: Path, tpuops_home: Path) -> None:
    name = unique("qr")
    gcp.tpu.queued_seconds = 0.2
    spec = write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: us-central2-b
        tpu: {{type: v4-8, runtime: tpu-ubuntu2204-base, queued: true, spot: true}}
        """,
    )
    result = run_cli("up", str(spec), "--json", env=gcp.env)
    assert result.returncode == 0, result.stderr
    assert [a["kind"] for a in json.loads(result.stdout)["created"]] == ["queued_resource"]
    created = gcp.tpu_v2.server.calls("POST", r"/queuedResources$")
    assert [c.query["queuedResourceId"] for c in created] == [f"{name}-qr"]
    assert created[0].body["tpu"]["nodeSpec"][0]["nodeId"] == name and "spot" in created[0].body
    assert gcp.tpu.queued[("us-central2-b", f"{name}-qr")].state == "ACTIVE"
    assert state_of(tpuops_home, name)["workers"][0]["ssh_host"] == "127.0.0.10"

    again = run_cli("up", str(spec), "--json", env=gcp.env)
    assert again.returncode == 0 and json.loads(again.stdout)["created"] == []

    gone = run_cli("down", name, "--yes", "--json", env=gcp.env)
    assert gone.returncode == 0, gone.stderr
    assert [d["kind"] for d in json.loads(gone.stdout)["deleted"]] == ["queued_resource"]
    deletes = gcp.tpu_v2.server.calls("DELETE", r"/queuedResources/")
    assert [d.query.get("force") for d in deletes] == ["true"]
    assert not gcp.tpu.queued and not gcp.tpu.nodes


def test_failed_queued_resource_is_deleted_at_once(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("qf")
    spec = write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: us-central2-b
        tpu: {{type: v4-8, runtime: tpu-ubuntu2204-base, queued: true}}
        """,
    )
    gcp.tpu.queued_failures["us-central2-b"] = 1
    first = run_cli("up", str(spec), env=gcp.env)
    assert first.returncode == 1
    assert "is FAILED" in first.stderr and "no more capacity" in first.stderr.lower()
    assert "--wait-for-capacity" in first.stderr
    assert not gcp.tpu.queued  # a FAILED queued resource holds quota: not left behind
    second = run_cli("up", str(spec), "--json", env=gcp.env)
    assert second.returncode == 0, second.stderr
    assert gcp.tpu.queued[("us-central2-b", f"{name}-qr")].state == "ACTIVE"


def test_suspended_queued_resource_is_recreated(gcp: FakeGcp, tmp_path: Path) -> None:
    name = unique("qs")
    spec = write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: us-central2-b
        tpu: {{type: v4-8, runtime: tpu-ubuntu2204-base, queued: true}}
        """,
    )
    assert run_cli("up", str(spec), env=gcp.env).returncode == 0
    gcp.tpu.suspend_queued("us-central2-b", f"{name}-qr")
    again = run_cli("up", str(spec), "--json", env=gcp.env)
    assert again.returncode == 0, again.stderr
    assert [(a["verb"], a["kind"]) for a in json.loads(again.stdout)["created"]] == [("recreate", "queued_resource")]
    assert [d.query.get("force") for d in gcp.tpu_v2.server.calls("DELETE", r"/queuedResources/")] == ["true"]
    assert gcp.tpu.queued[("us-central2-b", f"{name}-qr")].state == "ACTIVE"
    assert gcp.tpu.nodes[("us-central2-b", name)].state == "READY"


def test_legacy_node_with_client_vm(gcp: FakeGcp, tmp_path: Path, tpuops_home: Path) -> None:
    name, bucket = unique("node"), unique("tpuops-b")
    spec = write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: europe-west4-a
        tpu: {{type: v3-8, mode: node, runtime: "2.12.0", preemptible: true}}
        client_vm: {{machine_type: n1-standard-2}}
        bucket: {{name: {bucket}}}
        trainer: {{framework: tensorflow, command: python3 train.py}}
        """,
    )
    gcp.tpu_v1.faults.http_error("RPC", "CreateNode", 503)  # transient on gRPC too
    gcp.tpu_v1.faults.http_error("RPC", "GetOperation", 503)
    gcp.compute_api.server.faults.http_error("POST", r"/instances$", 429)
    gcp.compute.transient_failures["europe-west4-a"] = 1  # and a failed operation: the insert is made again
    result = run_cli("up", str(spec), "--json", env=gcp.env)
    assert result.returncode == 0, result.stderr
    assert sorted(a["kind"] for a in json.loads(result.stdout)["created"]) == ["bucket", "client_vm", "iam", "tpu"]
    assert len(gcp.compute_api.server.calls("POST", r"/instances$")) == 3
    assert [c[0] for c in gcp.tpu_v1.calls].count("CreateNode") == 2  # through the v1 gRPC API, retried once
    assert not gcp.tpu_v2.server.calls("POST", r"/nodes$")
    node = gcp.tpu.nodes[("europe-west4-a", name)]
    assert (node.mode, node.runtime, node.preemptible) == ("node", "2.12.0", True)
    vm = gcp.compute.instances[("europe-west4-a", f"{name}-client")]
    assert vm.labels == {"tpuops-cluster": name} and vm.metadata["ssh-keys"].startswith(
        f"{state_user(tpuops_home, name)}:ssh-ed25519 "
    )
    # A legacy Node reads GCS as the Cloud TPU service agent: that identity gets the bucket.
    policy = gcp.storage().bucket(bucket).get_iam_policy(requested_policy_version=3)
    assert [(b["role"], sorted(b["members"])) for b in policy.bindings] == [
        ("roles/storage.objectAdmin", [f"serviceAccount:{NODE_AGENT}"])
    ]
    state = state_of(tpuops_home, name)
    assert [(w["ssh_host"], w["internal_ip"]) for w in state["workers"]] == [("127.0.0.50", "10.140.0.2")]
    tpu_record = next(r for r in state["resources"] if r["kind"] == "tpu")
    assert tpu_record["node_ips"] == ["10.130.0.2"]  # the Node is reached at IP:8470
    known_hosts = (tpuops_home / "clusters" / name / "known_hosts").read_text().splitlines()
    assert known_hosts == [f"127.0.0.50 {' '.join(gcp.compute.host_keys(f'{name}-client')[0])}"]

    gone = run_cli("down", name, "--yes", "--delete-bucket", "--json", env=gcp.env)
    assert gone.returncode == 0, gone.stderr
    assert sorted(d["kind"] for d in json.loads(gone.stdout)["deleted"]) == ["bucket", "client_vm", "tpu"]
    assert not gcp.tpu.nodes and not gcp.compute.instances
    assert gcp.storage().lookup_bucket(bucket) is None
    assert not (tpuops_home / "clusters" / name / "state.json").exists()


def state_user(home: Path, name: str) -> str:
    return state_of(home, name)["ssh_user"]
