"""tpu.slices: Multislice specs, their errors (file, line, field) and what plan shows for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import write_spec
from tpuops.errors import SpecError
from tpuops.ops.specs import load_checked
from tpuops.plan import make_plan, node_names, tpu_kind

MULTISLICE = """
name: big-run
zone: us-central2-b
tpu:
  type: v4-16
  runtime: tpu-ubuntu2204-base
  slices: 2
trainer: {framework: jax, command: python3 train.py}
"""


def error_for(tmp_path: Path, text: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_checked(write_spec(tmp_path, text))
    return caught.value


def test_slices_imply_a_queued_resource_and_plan_counts_every_slice(tmp_path: Path) -> None:
    spec = load_checked(write_spec(tmp_path, MULTISLICE))
    assert spec.tpu.through_queue and not spec.tpu.queued and tpu_kind(spec) == "queued_resource"
    assert node_names(spec) == ("big-run-0", "big-run-1")
    plan = make_plan(spec)
    [action] = plan.actions
    assert (action.kind, action.name) == ("queued_resource", "big-run-qr")
    assert "2 slices, nodes big-run-0..big-run-1" in action.summary
    assert "4 hosts, 16 chips in all" in action.summary
    one = make_plan(load_checked(write_spec(tmp_path, MULTISLICE.replace("slices: 2", "slices: 1"), "one.yaml")))
    assert plan.cost_per_hour == pytest.approx(2 * one.cost_per_hour) and one.cost_per_hour > 0
    assert "(2 slices)" in plan.cost_note
    assert node_names(load_checked(write_spec(tmp_path, MULTISLICE.replace("slices: 2", "slices: 1"), "o.yaml"))) \
        == ("big-run",)


@pytest.mark.parametrize(("change", "message", "hint"), [
    (("type: v4-16", "type: v3-32"), "Multislice is not offered for v3 TPUs", "v4, v5litepod, v5p, v6e"),
    (("slices: 2", "slices: 0"), "greater than or equal to 1", None),
    (("slices: 2", "slices: 65"), "less than or equal to 64", None),
])
def test_bad_slices_name_the_line_and_field(tmp_path: Path, change: tuple[str, str], message: str,
                                            hint: str | None) -> None:
    err = error_for(tmp_path, MULTISLICE.replace(*change))
    assert message in err.message
    assert err.field == "tpu.slices" and err.line == 6
    if hint:
        assert hint in (err.hint or "")


def test_legacy_node_and_local_simulator_refuse_slices(tmp_path: Path) -> None:
    node = error_for(tmp_path, """
name: old
zone: us-central1-f
tpu: {type: v2-8, mode: node, runtime: "2.12.0", slices: 2}
client_vm: {machine_type: n1-standard-2}
""")
    assert node.field == "tpu.slices" and "legacy TPU Node" in node.message
    local = error_for(tmp_path, """
name: sim
provider: local
tpu: {type: v4-16, slices: 2}
""")
    assert local.field == "tpu.slices" and "one slice" in local.message and "provider: gcp" in (local.hint or "")
