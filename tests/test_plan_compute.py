"""tpu.api: compute in the spec, `plan` and `tpuops catalog`: TPU7x only through Compute Engine, what Compute
Engine would be asked to create and at what list price."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tpuops import catalog
from tpuops.errors import SpecError
from tpuops.ops.specs import check_spec_file, load_checked
from tpuops.plan import make_plan

IRONWOOD = """
name: ironwood
zone: us-central1-c
tpu:
  type: tpu7x-32
  spot: true
bucket: {name: ironwood-data}
"""


def test_tpu7x_slice_is_one_kind_naming_its_policy_template_and_group(tmp_path: Path) -> None:
    plan = make_plan(load_checked(write_spec(tmp_path, IRONWOOD)), project="p")
    [group] = plan.actions[2:]
    assert (group.kind, group.name, group.zone) == ("compute_tpu", "ironwood", "us-central1-c")
    assert "workload policy ironwood-wp in us-central1 (HIGH_THROUGHPUT, accelerator topology 2x2x4)" in group.summary
    assert "instance template ironwood-it (tpu7x-standard-4t (4 chips)" in group.summary
    assert "ubuntu-accel-2404-amd64-tpu-tpu7x" in group.summary
    assert "hyperdisk-balanced 100 GB, spot, onHostMaintenance TERMINATE" in group.summary
    assert "4 hosts of tpu7x-standard-4t, 16 chips, all at once (BULK), no repair" in group.summary
    assert group.summary.endswith("instance group ironwood")
    assert plan.cost_per_hour == 0.0 and plan.cost_note.startswith("no list price known for 4 x tpu7x-standard-4t")


def test_v6e_as_one_compute_engine_vm_with_its_price(tmp_path: Path) -> None:
    text = IRONWOOD.replace("us-central1-c", "us-east1-d").replace("type: tpu7x-32\n  spot: true",
                                                                   "type: v6e-8\n  api: compute\n  flex_start: 3d")
    plan = make_plan(load_checked(write_spec(tmp_path, text)))
    [instance] = plan.actions[2:]
    assert (instance.kind, instance.name) == ("compute_tpu", "ironwood")
    assert "ct6e-standard-8t (8 chips)" in instance.summary and "flex-start for at most 3d" in instance.summary
    assert plan.cost_per_hour == pytest.approx(8 * 2.70)
    assert "1 x ct6e-standard-8t $21.60/h" in plan.cost_note and "flex-start" in plan.cost_note
    on_tpu_api = text.replace("  api: compute\n  flex_start: 3d\n", "")
    assert make_plan(load_checked(write_spec(tmp_path, on_tpu_api))).actions[2].kind == "tpu"  # v6e's default


@pytest.mark.parametrize(("change", "field", "message"), [
    (("spot: true", "api: tpu"), "tpu.api", "the Cloud TPU API is not supported on TPU7x and later (tpu7x-32)"),
    (("spot: true", "queued: true"), "tpu.queued", "queued resources and Multislice belong to the Cloud TPU API"),
    (("spot: true", "preemptible: true"), "tpu.preemptible", "Compute Engine TPUs have no preemptible model"),
    (("spot: true", "spot: true\n  reservation: block-a"), "tpu.reservation", "spot and reservation are exclusive"),
    (("spot: true", "flex_start: 8d"), "tpu.flex_start", "outside 10m..7d"),
    (("type: tpu7x-32", "type: tpu7x-24"), "tpu.type", "tpu7x-24 has no Compute Engine shape"),
    (("type: tpu7x-32\n  spot: true", "type: v4-8\n  api: compute"), "tpu.api",
     "Compute Engine makes TPUs of tpu7x, v6e, v5p only, not v4"),
    (("type: tpu7x-32\n  spot: true", "type: v6e-8\n  reservation: block-a"), "tpu.reservation",
     "tpu.reservation is a Compute Engine provisioning model"),
])
def test_refusals_name_the_field(tmp_path: Path, change: tuple[str, str], field: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(field) + ": .*" + re.escape(message)) as caught:
        load_checked(write_spec(tmp_path, IRONWOOD.replace(*change)))
    assert "\n" not in str(caught.value)


def test_plan_as_a_user_runs_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, IRONWOOD)
    shown = run_cli("plan", str(spec))
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"create +compute_tpu +ironwood ", shown.stdout) and "HIGH_THROUGHPUT" in shown.stdout
    refused = run_cli("plan", str(write_spec(tmp_path, IRONWOOD.replace("spot: true", "api: tpu"), "tpu.yaml")))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "not supported on TPU7x and later" in refused.stderr


@pytest.mark.parametrize(("tpu_type", "warned"), [("tpu7x-16", True), ("tpu7x-8", False)])
def test_tensorflow_on_a_compute_engine_slice_is_warned_of(tmp_path: Path, tpu_type: str, warned: bool) -> None:
    """TPUClusterResolver finds a slice's workers through the Cloud TPU API; tpuops gives TF TPU_NAME=local."""
    text = IRONWOOD.replace("type: tpu7x-32", f"type: {tpu_type}") + \
        "trainer: {framework: tensorflow, command: 'true'}\n"
    warnings = check_spec_file(write_spec(tmp_path, text)).warnings
    assert any("TensorFlow finds a multi-host slice's workers through the Cloud TPU API" in w
               for w in warnings) == warned


def test_the_guard_of_a_compute_engine_tpu_needs_compute_roles(tmp_path: Path) -> None:
    guarded = make_plan(load_checked(write_spec(tmp_path, IRONWOOD + "guard: {enabled: true}\n"))).guard
    assert guarded is not None and guarded.guard_roles[0].startswith("roles/compute.instanceAdmin.v1")
    assert not any("roles/tpu.admin" in role for role in guarded.guard_roles)


POOLS = """
name: ironwood
tpu:
  api: compute
  pools:
    - {type: tpu7x-32, zone: us-central1-c, provisioning: spot}
    - {type: v6e-16, zone: us-east1-d, provisioning: spot}
bucket: {name: "ironwood-{region}"}
"""


def test_each_pool_is_priced_as_compute_engine_bills_it(tmp_path: Path) -> None:
    """By machine type: TPU7x has no list price, so it is not priced (not $0.00)."""
    spec = write_spec(tmp_path, POOLS)
    pools = make_plan(load_checked(spec)).pools
    v6e_spot_chip = catalog.load().generations["v6e"].price_spot
    assert [pool.price_per_hour for pool in pools] == [None, pytest.approx(4 * 4 * v6e_spot_chip)]
    shown = run_cli("plan", str(spec))
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if re.match(r" +\d\. ", line)]
    assert [line.split()[6] for line in lines] == ["?", f"${16 * v6e_spot_chip:.2f}/h"]


def test_every_pool_meets_the_compute_engine_rules_not_only_the_first(tmp_path: Path) -> None:
    """A later pool Compute Engine cannot make (v6e-2 has no machine type) is refused before anything is created,
    naming that pool's field, as the first pool would be."""
    more = POOLS.replace('bucket:', '    - {type: v6e-2, zone: us-east1-d, provisioning: on-demand}\nbucket:')
    with pytest.raises(SpecError, match=re.escape("spec.yaml:7: tpu.pools.2.type: v6e-2 has no Compute Engine shape")):
        load_checked(write_spec(tmp_path, more))
    refused = run_cli("plan", str(write_spec(tmp_path, more, "more.yaml")))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "tpu.pools.2.type" in refused.stderr
