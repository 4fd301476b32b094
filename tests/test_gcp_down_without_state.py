"""`tpuops down NAME` and `status NAME` with the local state gone: they search the project by the cluster's
label, and never say "nothing left" for a search that did not run to the end. The CLI as a subprocess, the real
Google clients against the wire fakes."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from tests.fakes.cloud import PROJECT, FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec

ZONE = "us-central2-b"


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def lost_cluster(gcp: FakeGcp, tmp_path: Path, home: Path, tpu: str = "queued: true") -> str:
    """A queued TPU and its bucket, brought up, then the local state (and the spec) gone."""
    name = f"lost-{uuid.uuid4().hex[:8]}"
    spec = write_spec(tmp_path, f"""
        name: {name}
        zone: {ZONE}
        tpu: {{type: v4-8, runtime: tpu-ubuntu2204-base, {tpu}}}
        bucket: {{name: {name}-b}}
        """)
    result = run_cli("up", str(spec), env=gcp.env)
    assert result.returncode == 0, result.stderr
    shutil.rmtree(home / "clusters" / name)
    spec.unlink()
    return name


def no_project(gcp: FakeGcp, tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "gcloud"
    empty.mkdir()
    return {**gcp.env, "GOOGLE_CLOUD_PROJECT": "", "CLOUDSDK_CORE_PROJECT": "", "CLOUDSDK_CONFIG": str(empty)}


def test_down_without_state_finds_and_deletes_by_label(gcp: FakeGcp, tmp_path: Path, tpuops_home: Path) -> None:
    name = lost_cluster(gcp, tmp_path, tpuops_home)
    env = no_project(gcp, tmp_path)
    result = run_cli("down", name, "--project", PROJECT, "--yes", "--json", env=env)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(d["kind"], d["name"]) for d in report["deleted"]] == [("queued_resource", f"{name}-qr")]
    assert report["where"] == f"project {PROJECT}, every zone" and report["kept_bucket"] == f"{name}-b"
    assert not gcp.tpu.queued and not gcp.tpu.nodes
    assert gcp.storage().lookup_bucket(f"{name}-b") is not None  # kept, as always without --delete-bucket

    again = run_cli("down", name, "--project", PROJECT, "--yes", "--delete-bucket", env=env)
    assert again.returncode == 0, again.stderr
    assert f"deleted bucket {name}-b" in again.stdout
    last = run_cli("down", name, "--project", PROJECT, "--yes", env=env)
    assert last.returncode == 0, last.stderr
    assert f"nothing was left to delete (searched project {PROJECT}, every zone)" in last.stdout


def test_down_without_state_deletes_every_slice_with_their_queued_resource(gcp: FakeGcp, tmp_path: Path,
                                                                         tpuops_home: Path) -> None:
    name = lost_cluster(gcp, tmp_path, tpuops_home, tpu="slices: 3")
    assert len(gcp.tpu.nodes) == 3
    status = run_cli("status", name, env=gcp.env)
    assert status.returncode == 0 and f"{name}-0: READY, {name}-1: READY, {name}-2: READY" in status.stdout
    result = run_cli("down", name, "--yes", "--json", env=gcp.env)

    assert result.returncode == 0, result.stderr
    # The slices go with their queued resource (force): they are not deleted one by one.
    assert [(d["kind"], d["name"]) for d in json.loads(result.stdout)["deleted"]] == [("queued_resource", f"{name}-qr")]
    assert not gcp.tpu.queued and not gcp.tpu.nodes
    assert not gcp.tpu_v2.server.calls("DELETE", r"/nodes/")


def test_a_search_that_cannot_finish_deletes_nothing_and_says_so(gcp: FakeGcp, tmp_path: Path,
                                                                 tpuops_home: Path) -> None:
    name = lost_cluster(gcp, tmp_path, tpuops_home)
    gcp.compute_api.server.faults.http_error("GET", r"/aggregated/instances$", 403, times=-1)
    result = run_cli("down", name, "--yes", env=gcp.env)

    assert result.returncode != 0
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert f"could not search project {PROJECT} for VMs of cluster {name}" in line and "--zone" in line
    assert "nothing was left" not in result.stdout
    assert gcp.tpu.queued and gcp.tpu.nodes  # nothing deleted on half an answer


def test_without_a_project_it_says_what_to_pass(gcp: FakeGcp, tmp_path: Path) -> None:
    result = run_cli("down", "ghost", "--yes", env=no_project(gcp, tmp_path))
    assert result.returncode != 0
    assert "cannot search for cluster ghost: no GCP project known" in result.stderr
    assert "--project" in result.stderr and "nothing was left" not in result.stdout


def test_zone_limits_the_search(gcp: FakeGcp, tmp_path: Path, tpuops_home: Path) -> None:
    name = lost_cluster(gcp, tmp_path, tpuops_home)
    gcp.tpu.unreachable_zones.add("europe-west4-a")  # every-zone lists cannot finish: --zone still can
    elsewhere = run_cli("down", name, "--yes", env=gcp.env)
    assert elsewhere.returncode != 0 and "could not reach europe-west4-a" in elsewhere.stderr

    result = run_cli("down", name, "--zone", ZONE, "--yes", env=gcp.env)
    assert result.returncode == 0, result.stderr
    assert f"deleted queued_resource {name}-qr" in result.stdout and not gcp.tpu.queued


def test_status_without_state_shows_what_carries_the_label(gcp: FakeGcp, tmp_path: Path,
                                                           tpuops_home: Path) -> None:
    name = lost_cluster(gcp, tmp_path, tpuops_home)
    result = run_cli("status", name, env=gcp.env)

    assert result.returncode == 0, result.stderr
    assert f"no local state: found by its label in project {PROJECT}, every zone" in result.stdout
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:] if line.startswith("  ")}
    assert "ACTIVE" in rows["queued_resource"] and "READY" in rows["tpu"] and "EXISTS" in rows["bucket"]

    run_cli("down", name, "--yes", "--delete-bucket", env=gcp.env)
    gone = run_cli("status", name, env=gcp.env)
    assert gone.returncode == 1
    assert f"nothing labelled tpuops-cluster={name} in project {PROJECT}, every zone" in gone.stderr

    gcp.tpu_v2.server.faults.http_error("GET", r"/locations/-/nodes$", 403, times=-1)
    failed = run_cli("status", name, env=gcp.env)
    assert failed.returncode != 0 and "could not search project" in failed.stderr
