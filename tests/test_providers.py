"""The provider objects Context builds, and state written before resource records were typed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import write_spec
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.providers.base import TrainerSite
from tpuops.spec import load_spec
from tpuops.state import BucketRecord, IamRecord, TpuRecord


def test_state_with_detail_text_reads_into_typed_records(tpuops_home: Path) -> None:
    directory = tpuops_home / "clusters" / "old"
    directory.mkdir(parents=True)
    (directory / "state.json").write_text(json.dumps({
        "name": "old", "provider": "gcp", "project": "p", "spec_path": "/nowhere.yaml",
        "resources": [
            {"kind": "bucket", "name": "b", "status": "created", "detail": {"location": "EUROPE-WEST4"}},
            {"kind": "iam", "name": "b", "status": "created",
             "detail": {"member": "serviceAccount:x@y", "role": "roles/storage.objectAdmin"}},
            {"kind": "tpu", "name": "old", "zone": "us-central1-f", "status": "created",
             "detail": {"node": "old", "mode": "node", "tpu_endpoints": "10.0.0.2:8470,10.0.0.3:8470"}},
        ],
    }))
    store = Context.from_env().store
    state = store.require("old")
    bucket, iam, tpu = state.resources
    assert isinstance(bucket, BucketRecord) and bucket.location == "EUROPE-WEST4"
    assert isinstance(iam, IamRecord) and (iam.member, iam.role) == ("serviceAccount:x@y", "roles/storage.objectAdmin")
    assert isinstance(tpu, TpuRecord) and state.tpu_record() is tpu
    assert (tpu.node, tpu.mode, tpu.node_ips) == ("old", "node", ["10.0.0.2", "10.0.0.3"])
    store.save(state)  # written back typed, and read the same
    again = json.loads((directory / "state.json").read_text())
    assert all("detail" not in r for r in again["resources"])
    assert store.require("old").resources == state.resources


def test_local_provider_keeps_everything_in_its_root(tmp_path: Path, tpuops_home: Path) -> None:
    spec = load_spec(write_spec(tmp_path, "name: q\nprovider: local\ntpu: {type: v3-8}\n"))
    provider = Context.from_env().provider_for(spec)
    bucket_dir = tpuops_home / "local" / "buckets" / "data"
    assert provider.localize("--in gs://data/x --out gs://other/y", ["data"]) == f"--in {bucket_dir}/x --out gs://other/y"
    assert provider.tpu_paths(vfio=True) == ("~/dev/vfio/*", "~/tmp/libtpu_lockfile")
    assert provider.coordinator("10.0.0.1").startswith("127.0.0.1:")
    assert provider.framework_env(TrainerSite("q", "pytorch", "vm")) == {"PJRT_DEVICE": "CPU"}
    assert provider.relay_hosts([]) == {}
    store = provider.blob_store("gs://data/logs")
    assert Path(store.root) == bucket_dir / "logs"  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="needs SSH workers"):
        provider.require_ssh("q")


def test_gcp_provider_needs_a_project_only_for_its_clients(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, "name: g\nzone: europe-west4-a\ntpu: {type: v3-8}\n"))
    ctx = Context.from_env(env={"TPUOPS_HOME": str(tmp_path), "CLOUDSDK_CONFIG": "/nonexistent"})
    provider = ctx.provider_for(spec)
    assert provider.tpu_paths(vfio=False) == ("/dev/accel*", "/tmp/libtpu_lockfile")
    assert provider.coordinator("10.0.0.1") == "10.0.0.1:8476"
    assert provider.localize("gs://data/x", ["data"]) == "gs://data/x"
    with pytest.raises(UsageError, match="no recorded IP address"):
        provider.framework_env(TrainerSite("g", "pytorch", "node"))
    with pytest.raises(UsageError, match="no GCP project given"):
        provider.cloud()
