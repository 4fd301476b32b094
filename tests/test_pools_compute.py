"""A slice made by Compute Engine (tpu.api: compute) made again where its earlier group left its instance template
and workload policy behind (the autostop agent deletes only the group; an interrupted `up` may stop before the group):
`up` deletes them before it creates, with one pool and across pools, so the new group is made from what the spec
says now. The Compute Engine, TPU and Cloud Quotas APIs are faked at the wire (the fixtures of test_quota.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.compute_tpu_model import region_of
from tests.helpers import run_cli, write_spec
from tests.test_quota import PROJECT, SPOT_ZONE, ZONE, Fakes, fakes, servers  # noqa: F401  (pytest fixtures)
from tpuops.cloud.gcp import make_cloud
from tpuops.cloud.kinds.base import Job, Ledger
from tpuops.cloud.kinds.compute_tpu import ComputeTpuKind, compute_request
from tpuops.spec import load_spec
from tpuops.state import ClusterState, StateStore, TpuRecord

NAME = "slices"
TEMPLATE, POLICY = f"{NAME}-it", f"{NAME}-wp"
ON_DEMAND_ZONE = "TPUV6EPerProjectPerZoneForTPUAPI"
EAST = "us-east1-d"
# The first pool is where the slice lands (the second has no quota); `up` places it only with several pools.
ACROSS_POOLS = f"""
name: {NAME}
project: {PROJECT}
tpu:
  api: compute
  pools:
    - {{type: v6e-16, zone: {ZONE}, provisioning: spot}}
    - {{type: v6e-16, zone: {EAST}, provisioning: spot}}
trainer: {{framework: jax, command: python3 train.py}}
"""
ONE_ZONE = f"""
name: {NAME}
project: {PROJECT}
zone: {ZONE}
tpu: {{type: v6e-16, api: compute, spot: true}}
trainer: {{framework: jax, command: python3 train.py}}
"""
ON_DEMAND = {ACROSS_POOLS: ("provisioning: spot}\n    - ", "provisioning: on-demand}\n    - "),
             ONE_ZONE: (", spot: true}", "}")}


def provisioning_of_template(made: Fakes) -> str:
    return made.compute_tpus.templates[TEMPLATE].body["properties"]["scheduling"]["provisioningModel"]


def index_of(made: Fakes, method: str, path_end: str, after: int = -1) -> int:
    """The position among every request to the Compute fake of the first `method` to a path ending so, after
    position `after`."""
    requests = made.compute_api.server.requests
    return next(at for at, request in enumerate(requests)
                if at > after and request.method == method and request.path.endswith(path_end))


@pytest.mark.parametrize("spec_text", [ACROSS_POOLS, ONE_ZONE], ids=["across-pools", "one-zone"])
def test_up_deletes_the_template_and_policy_an_earlier_slice_left_before_it_creates(
        fakes: Fakes, tmp_path: Path, spec_text: str) -> None:  # noqa: F811
    fakes.quotas.grant(SPOT_ZONE, {ZONE: 64})
    fakes.quotas.grant(ON_DEMAND_ZONE, {ZONE: 64})
    first = run_cli("up", str(write_spec(tmp_path, spec_text)), env=fakes.env(tmp_path))
    assert first.returncode == 0, first.stderr
    assert provisioning_of_template(fakes) == "SPOT"
    state = json.loads((tmp_path / "clusters" / NAME / "state.json").read_text())
    [record] = state["resources"]
    assert (record["kind"], record["zone"], record["parts"]) == (
        "compute_tpu", ZONE, [f"workload policy {POLICY}", f"instance template {TEMPLATE}"])
    with fakes.compute.lock:  # the autostop agent deletes the group (its VMs with it), not what it was made from
        fakes.compute_tpus.delete_group(fakes.compute_tpus.groups[(ZONE, NAME)])
    assert TEMPLATE in fakes.compute_tpus.templates and (region_of(ZONE), POLICY) in fakes.compute_tpus.policies
    seen = len(fakes.compute_api.server.requests)

    # Spot no longer wanted: the leftover template still says SPOT, and a create that took it would make Spot VMs.
    on_demand = spec_text.replace(*ON_DEMAND[spec_text])
    assert on_demand != spec_text
    again = run_cli("up", str(write_spec(tmp_path, on_demand)), env=fakes.env(tmp_path))
    assert again.returncode == 0, again.stderr
    assert provisioning_of_template(fakes) == "STANDARD"
    assert fakes.compute.instances and all(instance.scheduling.get("provisioningModel") == "STANDARD"
               for instance in fakes.compute.instances.values())
    deleted = [index_of(fakes, "DELETE", f"/instanceTemplates/{TEMPLATE}", seen),
               index_of(fakes, "DELETE", f"/resourcePolicies/{POLICY}", seen)]
    made = [index_of(fakes, "POST", "/instanceTemplates", seen), index_of(fakes, "POST", "/resourcePolicies", seen)]
    assert max(deleted) < min(made), fakes.compute_api.server.requests[seen:]
    assert f"deleting what the earlier slice left (workload policy {POLICY}, instance template {TEMPLATE})" \
        in again.stdout + again.stderr


def test_a_slice_gone_from_a_pool_the_spec_no_longer_names_leaves_nothing_the_next_pool_takes(
        fakes: Fakes, tmp_path: Path) -> None:  # noqa: F811
    """The template is global: a slice made in another pool would be made from the old pool's template (its Spot
    scheduling here). It and the old region's policy are deleted; the new pool's slice gets its own."""
    fakes.quotas.grant(SPOT_ZONE, {ZONE: 64})
    fakes.quotas.grant(ON_DEMAND_ZONE, {EAST: 64})
    first = run_cli("up", str(write_spec(tmp_path, ACROSS_POOLS)), env=fakes.env(tmp_path))
    assert first.returncode == 0, first.stderr
    with fakes.compute.lock:
        fakes.compute_tpus.delete_group(fakes.compute_tpus.groups[(ZONE, NAME)])
    elsewhere = ACROSS_POOLS.replace(f"zone: {ZONE}, provisioning: spot", f"zone: {EAST}, provisioning: on-demand")
    assert ZONE not in elsewhere
    seen = len(fakes.compute_api.server.requests)
    again = run_cli("up", str(write_spec(tmp_path, elsewhere)), env=fakes.env(tmp_path))
    assert again.returncode == 0, again.stderr
    assert index_of(fakes, "DELETE", f"/regions/{region_of(ZONE)}/resourcePolicies/{POLICY}", seen) >= 0
    assert index_of(fakes, "DELETE", f"/instanceTemplates/{TEMPLATE}", seen) < \
        index_of(fakes, "POST", "/instanceTemplates", seen)
    assert provisioning_of_template(fakes) == "STANDARD"
    assert list(fakes.compute_tpus.policies) == [(region_of(EAST), POLICY)]
    assert list(fakes.compute_tpus.groups) == [(EAST, NAME)]


def test_clear_leftovers_deletes_the_recorded_slices_template_and_policy_and_nothing_else(
        fakes: Fakes, tmp_path: Path) -> None:  # noqa: F811
    """Directly, as `create` calls it: what the record names, in the record's zone; another cluster's slice and a
    record without parts (one instance: nothing besides it) are left alone."""
    spec = load_spec(write_spec(tmp_path, ONE_ZONE))
    api = make_cloud(fakes.env(tmp_path), PROJECT).compute_tpus
    assert api is not None
    for name in (NAME, "other"):
        api.create_tpu_vm(compute_request(spec.model_copy(update={"name": name}), ZONE, None))
    with fakes.compute.lock:
        fakes.compute_tpus.delete_group(fakes.compute_tpus.groups[(ZONE, NAME)])
    state = ClusterState(name=NAME, provider="gcp", project=PROJECT, spec_path="x")
    job = Job(spec, make_cloud(fakes.env(tmp_path), PROJECT), Ledger(StateStore(tmp_path), state))
    kind = ComputeTpuKind()

    state.set_resource(TpuRecord(kind="compute_tpu", name=NAME, zone=ZONE, status="created"))  # no parts
    seen = len(fakes.compute_api.server.requests)
    kind.clear_leftovers(job)
    assert not fakes.compute_api.server.requests[seen:]

    state.set_resource(TpuRecord(kind="compute_tpu", name=NAME, zone=ZONE, status="created",
                                 parts=[f"workload policy {POLICY}", f"instance template {TEMPLATE}"]))
    kind.clear_leftovers(job)
    assert set(fakes.compute_tpus.templates) == {"other-it"}
    assert set(fakes.compute_tpus.policies) == {(region_of(ZONE), "other-wp")}
    assert list(fakes.compute_tpus.groups) == [(ZONE, "other")]
