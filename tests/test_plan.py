"""plan: what up would create, for whom the IAM grant is, region warnings and cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import write_spec
from tests.test_spec import GOOD, NODE
from tpuops.errors import ForeignResourceError
from tpuops.ops.specs import load_checked
from tpuops.plan import ObservedResource, make_plan
from tpuops.spec import Spec


def spec_from(tmp_path: Path, text: str) -> Spec:
    return load_checked(write_spec(tmp_path, text))


def test_tpu_vm_plan(tmp_path: Path) -> None:
    plan = make_plan(spec_from(tmp_path, GOOD), project="my-project")
    assert [(a.verb, a.kind, a.name) for a in plan.actions] == [
        ("create", "bucket", "kcbert-data"), ("create", "iam", "kcbert-data"), ("create", "tpu", "kcbert-v3"),
    ]
    bucket, iam, tpu = plan.actions
    assert "location europe-west4" in bucket.summary
    assert "roles/storage.objectAdmin on this bucket only" in iam.summary
    assert "Compute default service account" in iam.summary
    assert "1 host, 4 chips, 8 TensorCores" in tpu.summary and "on-demand" in tpu.summary
    assert tpu.zone == "europe-west4-a"
    assert plan.cost_per_hour == pytest.approx(8.00)
    assert plan.warnings == ()


def test_explicit_service_account_is_the_member(tmp_path: Path) -> None:
    text = GOOD.replace("  type: v3-8", "  type: v3-8\n  service_account: trainer@my-project.iam.gserviceaccount.com")
    iam = make_plan(spec_from(tmp_path, text)).actions[1]
    assert "trainer@my-project.iam.gserviceaccount.com" in iam.summary


def test_pod_slice_spot_queued(tmp_path: Path) -> None:
    text = GOOD.replace("europe-west4-a", "us-central2-b").replace("type: v3-8", "type: v4-32\n  spot: true\n"
                                                                    "  queued: true").replace(
        "tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.16.1-pod-pjrt")
    plan = make_plan(spec_from(tmp_path, text))
    queued = plan.actions[2]
    assert (queued.kind, queued.name) == ("queued_resource", "kcbert-v3-qr")
    assert "pod slice v4-32: 4 hosts, 16 chips, 32 TensorCores" in queued.summary and "spot" in queued.summary
    assert plan.cost_per_hour == pytest.approx(16 * 0.97)


def test_legacy_node_plan_grants_the_tpu_service_agent(tmp_path: Path) -> None:
    plan = make_plan(spec_from(tmp_path, NODE))
    kinds = [a.kind for a in plan.actions]
    assert kinds == ["bucket", "iam", "tpu", "client_vm"]
    assert "cloud-tpu.iam.gserviceaccount.com" in plan.actions[1].summary
    assert plan.actions[3].name == "node-run-client" and "n1-standard-2" in plan.actions[3].summary
    assert plan.cost_per_hour == pytest.approx(4 * 1.125 + 0.095 + 50 * 0.10 / 730, rel=1e-3)


def test_bucket_outside_region_warns(tmp_path: Path) -> None:
    plan = make_plan(spec_from(tmp_path, GOOD.replace("  name: kcbert-data", "  name: kcbert-data\n  location: US")))
    assert any("egress" in w and "europe-west4" in w for w in plan.warnings)
    assert "location US" in plan.actions[0].summary


def test_multi_host_tf_runtime_without_pod_variant_warns(tmp_path: Path) -> None:
    text = GOOD.replace("type: v3-8", "type: v3-32")
    assert any("-pod runtime" in w for w in make_plan(spec_from(tmp_path, text)).warnings)


def test_observed_resources_are_kept_or_recreated(tmp_path: Path) -> None:
    spec = spec_from(tmp_path, GOOD)
    observed = [ObservedResource("bucket", "kcbert-data"), ObservedResource("iam", "kcbert-data"),
                ObservedResource("tpu", "kcbert-v3", state="READY", zone="europe-west4-a")]
    assert [a.verb for a in make_plan(spec, observed).actions] == ["keep", "keep", "keep"]
    assert make_plan(spec, observed).changes == ()
    preempted = [*observed[:2], ObservedResource("tpu", "kcbert-v3", state="PREEMPTED")]
    tpu = make_plan(spec, preempted).actions[2]
    assert tpu.verb == "recreate" and "PREEMPTED" in tpu.reason


@pytest.mark.parametrize("state", ["FAILED", "SUSPENDED"])
def test_dead_queued_resource_is_recreated(tmp_path: Path, state: str) -> None:
    spec = spec_from(tmp_path, GOOD.replace("  type: v3-8", "  type: v3-8\n  queued: true"))
    action = make_plan(spec, [ObservedResource("queued_resource", "kcbert-v3-qr", state=state)]).actions[2]
    assert action.verb == "recreate"


def test_foreign_resource_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ForeignResourceError, match="tpuops-cluster=kcbert-v3"):
        make_plan(spec_from(tmp_path, GOOD), [ObservedResource("bucket", "kcbert-data", owned=False)])


def test_local_plan_is_free(tmp_path: Path) -> None:
    plan = make_plan(spec_from(tmp_path, "name: q\nprovider: local\ntpu: {type: v4-32}\nbucket: {name: qbucket}\n"))
    assert [a.kind for a in plan.actions] == ["bucket", "tpu"]
    assert "4 local workers" in plan.actions[1].summary
    assert plan.cost_per_hour == 0
