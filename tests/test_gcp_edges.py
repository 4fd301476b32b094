"""Bad input, missing credentials, existing IAM bindings, a lost worker: `tpuops up/status/down` on GCP."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec

ZONE = "europe-west4-a"
ROLE = "roles/storage.objectAdmin"


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def spec_file(tmp_path: Path, name: str, bucket: str | None = None) -> Path:
    bucket_line = f"bucket: {{name: {bucket}}}" if bucket else ""
    return write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: {ZONE}
        tpu: {{type: v3-8, runtime: tpu-vm-tf-2.16.1-pjrt}}
        {bucket_line}
        """,
    )


def test_without_endpoints_or_credentials_up_says_how_to_log_in(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_API_ENDPOINT", "STORAGE_EMULATOR"))}
    # google-auth skips its metadata-server probe only for the lower-case value.
    env.update({"GOOGLE_CLOUD_PROJECT": "p", "HOME": str(tmp_path), "NO_GCE_CHECK": "true"})
    env.pop("TPUOPS_TPU_V1_GRPC_ENDPOINT", None)
    (tmp_path / "project").mkdir()  # a spec in $HOME itself would push all of $HOME (code.path: .)
    result = run_cli("up", str(spec_file(tmp_path / "project", unique("nocred"))), env=env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "tpuops: error: no Google credentials found (hint: run `gcloud auth application-default login` or set "
        "GOOGLE_APPLICATION_CREDENTIALS)"
    ]


def test_bad_duration_is_refused_before_anything_is_created(gcp: FakeGcp, tmp_path: Path) -> None:
    result = run_cli("up", str(spec_file(tmp_path, unique("dur"))), "--wait-for-capacity", "soon", env=gcp.env)
    assert result.returncode == 2
    assert "cannot read duration 'soon'" in result.stderr and "1h30m" in result.stderr
    assert not gcp.tpu_v2.server.requests and not gcp.gcs.requests


def test_invalid_spec_creates_nothing(gcp: FakeGcp, tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        f"""
        name: {unique("bad")}
        zone: {ZONE}
        tpu: {{type: v3-9}}
        """,
    )
    result = run_cli("up", str(spec), env=gcp.env)
    assert result.returncode == 2
    assert "v3-9" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not gcp.tpu_v2.server.requests and not gcp.gcs.requests and not gcp.compute_api.server.requests


def test_existing_bindings_stay_and_an_adopted_bucket_is_kept(gcp: FakeGcp, tmp_path: Path) -> None:
    name, bucket = unique("iam"), unique("tpuops-b")
    storage = gcp.storage()
    existing = storage.bucket(bucket)
    existing.labels = {"tpuops-cluster": name}
    storage.create_bucket(existing, location="EUROPE-WEST4")
    policy = storage.bucket(bucket).get_iam_policy(requested_policy_version=3)
    policy.bindings.append({"role": "roles/storage.objectViewer", "members": {"user:ada@example.com"}})
    policy.bindings.append({"role": ROLE, "members": {"serviceAccount:ci@p.iam.gserviceaccount.com"}})
    storage.bucket(bucket).set_iam_policy(policy)

    result = run_cli("up", str(spec_file(tmp_path, name, bucket)), "--json", env=gcp.env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert sorted(a["kind"] for a in report["created"]) == ["iam", "tpu"]
    assert [a["kind"] for a in report["kept"]] == ["bucket"]
    bindings = {b["role"]: sorted(b["members"]) for b in storage.bucket(bucket).get_iam_policy().bindings}
    assert bindings == {
        "roles/storage.objectViewer": ["user:ada@example.com"],
        ROLE: [
            "serviceAccount:123456789012-compute@developer.gserviceaccount.com",
            "serviceAccount:ci@p.iam.gserviceaccount.com",
        ],
    }


def test_a_bucket_with_our_name_but_not_our_label_is_refused(gcp: FakeGcp, tmp_path: Path) -> None:
    name, bucket = unique("fb"), unique("tpuops-b")
    gcp.storage().create_bucket(bucket)
    result = run_cli("up", str(spec_file(tmp_path, name, bucket)), env=gcp.env)
    assert result.returncode == 1
    assert f"bucket '{bucket}' exists but does not carry the label tpuops-cluster={name}" in result.stderr
    assert not gcp.tpu_v2.server.calls("POST", r"/nodes$")


def test_status_shows_a_lost_worker_and_down_refuses_a_full_bucket(gcp: FakeGcp, tmp_path: Path) -> None:
    name, bucket = unique("lw"), unique("tpuops-b")
    spec = write_spec(
        tmp_path,
        f"""
        name: {name}
        zone: us-central2-b
        tpu: {{type: v4-16, runtime: tpu-ubuntu2204-base}}
        bucket: {{name: {bucket}}}
        """,
    )
    assert run_cli("up", str(spec), env=gcp.env).returncode == 0
    gcp.tpu.lose_worker("us-central2-b", name, 1)
    status = json.loads(run_cli("status", name, "--json", env=gcp.env).stdout)
    assert status["tpu_health"] == "UNHEALTHY_MAINTENANCE"
    assert [(w["index"], w["external_ip"]) for w in status["workers"]] == [(0, "127.0.0.10"), (1, None)]
    human = run_cli("status", name, env=gcp.env)
    assert "UNHEALTHY_MAINTENANCE" in human.stdout and "10.130.0.3" in human.stdout

    gcp.storage().bucket(bucket).blob("ckpt/model.bin").upload_from_string(b"weights")
    refused = run_cli("down", name, "--yes", "--delete-bucket", env=gcp.env)
    assert refused.returncode == 1
    assert "not empty: nothing was deleted" in refused.stderr and "--force" in refused.stderr
    assert gcp.tpu.nodes  # refused before deleting anything

    unconfirmed = run_cli("down", name, env=gcp.env, input_text="")
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    assert gcp.tpu.nodes

    forced = run_cli("down", name, "--yes", "--delete-bucket", "--force", env=gcp.env)
    assert forced.returncode == 0, forced.stderr
    assert not gcp.tpu.nodes and gcp.storage().lookup_bucket(bucket) is None
