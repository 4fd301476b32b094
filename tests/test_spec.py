"""Every validation rule: one SpecError naming file, line and field, with a useful hint; what the catalog only
does not know is a warning (the zone's API decides at `up`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import write_spec
from tpuops import catalog
from tpuops.errors import SpecError
from tpuops.ops.specs import check_spec_file
from tpuops.ops.specs import load_checked as load_spec
from tpuops.spec import bucket_name_problem, region_of

GOOD = """
name: kcbert-v3
project: my-project
zone: europe-west4-a
tpu:
  type: v3-8
  runtime: tpu-vm-tf-2.16.1-pjrt
bucket:
  name: kcbert-data
data:
  - {from: ./shards, to: gs://kcbert-data/shards}
trainer:
  framework: tensorflow
  setup: pip install -r requirements.txt
  command: python3 run_pretraining.py
logs:
  tensorboard: gs://kcbert-data/bert_model
"""

NODE = """
name: node-run
zone: us-central1-f
tpu:
  type: v2-8
  mode: node
  runtime: "2.12.0"
client_vm: {machine_type: n1-standard-2}
bucket: {name: node-data}
data:
  - {from: ./shards, to: gs://node-data/shards}
trainer: {framework: tensorflow, command: python3 train.py}
logs: {tensorboard: gs://node-data/logs}
"""


def error_for(tmp_path: Path, text: str) -> SpecError:
    path = write_spec(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    return caught.value


def test_good_spec_loads_with_defaults(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, GOOD))
    assert spec.name == "kcbert-v3" and spec.provider == "gcp" and spec.tpu.mode == "vm"
    assert spec.region == "europe-west4"
    assert spec.data[0].from_ == "./shards"
    assert spec.resource_labels == {"tpuops-cluster": "kcbert-v3"}
    assert spec.code.path == "." and spec.ssh.port == 22


def test_legacy_node_spec_loads(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, NODE))
    assert spec.tpu.mode == "node" and spec.client_vm is not None


@pytest.mark.parametrize(
    ("text", "line", "field", "message", "hint"),
    [
        # YAML syntax
        ("name: a\ntpu: [\n", 3, None, "invalid YAML", "indentation"),
        # unknown keys, with the close one suggested
        (GOOD.replace("  runtime:", "  runtme:"), 6, "tpu.runtme", "unknown key 'runtme'", "did you mean 'runtime'"),
        (GOOD.replace("project:", "projct:"), 2, "projct", "unknown key 'projct'", "did you mean 'project'"),
        (GOOD + "trainr: {}\n", 17, "trainr", "unknown key 'trainr'", "did you mean 'trainer'"),
        # unknown accelerator, with close ones
        (GOOD.replace("type: v3-8", "type: v3_8"), 5, "tpu.type", "unknown accelerator type 'v3_8'", "v3-8"),
        (GOOD.replace("type: v3-8", "type: tpu-v3"), 5, "tpu.type", "unknown accelerator type", "did you mean v3-8"),
        (GOOD.replace("type: v3-8", "type: v3-9"), 5, "tpu.type", "not a v3 size", "v3-32"),
        (GOOD.replace("type: v3-8", "type: v5e-8"), 5, "tpu.type", "not the name Google's API uses", "v5litepod-8"),
        ("name: q\nprovider: local\ntpu: {type: v3-16}\n", 3, "tpu.type", "not a v3 size", "v3-32"),
        ("name: q\nprovider: local\ntpu: {type: v7-8}\n", 3, "tpu.type", "local simulator knows only", "v6e"),
        (GOOD.replace("type: v3-8", "type: v7-8").replace("  runtime: tpu-vm-tf-2.16.1-pjrt\n", ""), 4,
         "tpu.runtime", "no default runtime for v7-8", "tpuops catalog"),
        # a zone name that cannot be one
        (GOOD.replace("europe-west4-a", "europe"), 3, "zone", "not a zone name", "europe-west4-a"),
        (GOOD.replace("zone: europe-west4-a\n", ""), None, None, "zone is required", None),
        # runtime that does not fit the generation or the mode
        (GOOD.replace("tpu-vm-tf-2.16.1-pjrt", "v2-alpha-tpuv5-lite"), 6, "tpu.runtime",
         "built for v5litepod TPUs, not v3", "tpu-vm-tf-2.16.1-pjrt"),
        (GOOD.replace("tpu-vm-tf-2.16.1-pjrt", "tpu-vm-v4-base"), 6, "tpu.runtime", "built for v4 TPUs, not v3", None),
        (GOOD.replace("europe-west4-a", "us-central1-a").replace("v3-8", "v5p-8").replace(
            "tpu-vm-tf-2.16.1-pjrt", "v2-alpha-tpuv6e"), 6, "tpu.runtime", "built for v6e TPUs, not v5p",
         "v2-alpha-tpuv5"),
        (GOOD.replace("tpu-vm-tf-2.16.1-pjrt", '"2.12.0"'), 6, "tpu.runtime", "legacy TPU Node version, not a TPU VM",
         "mode: node"),
        (GOOD.replace("tpu-vm-tf-2.16.1-pjrt", "pytorch-1.8"), 6, "tpu.runtime", "legacy TPU Node version", None),
        (NODE.replace('"2.12.0"', "tpu-vm-tf-2.16.1-pjrt"), 6, "tpu.runtime", "TPU VM runtime, not a legacy Node",
         "2.12.0"),
        # GCP naming rules
        (GOOD.replace("name: kcbert-v3", "name: KcBert"), 1, "name", "lowercase letters", None),
        (GOOD.replace("name: kcbert-v3", "name: 3bert"), 1, "name", "start with a letter", None),
        (GOOD.replace("name: kcbert-v3", "name: " + "a" * 41), 1, "name", "at most 40", None),
        (GOOD.replace("name: kcbert-data", "name: KC_data!"), 8, "bucket.name", "lowercase letters", None),
        (GOOD.replace("name: kcbert-data", "name: google-data"), 8, "bucket.name", "google", None),
        # framework
        (GOOD.replace("framework: tensorflow", "framework: mxnet"), 12, "trainer.framework", "'mxnet'", None),
        # legacy Node rules
        (NODE.replace("v2-8", "v4-8").replace("us-central1-f", "us-central2-b").replace('"2.12.0"', "x"), 5,
         "tpu.mode", "only for v2 and v3", "mode: vm"),
        (NODE.replace("v2-8", "v7-8"), 5, "tpu.mode", "only for v2 and v3", "mode: vm"),
        (NODE.replace("client_vm: {machine_type: n1-standard-2}\n", ""), 5, "tpu.mode", "needs a client_vm",
         "client_vm"),
        (NODE.replace("to: gs://node-data/shards", "to: /data/shards"), 10, "data.0.to", "reads data from GCS only",
         "gs://"),
        (NODE.replace("tensorboard: gs://node-data/logs", "tensorboard: /tmp/logs"), 12, "logs.tensorboard",
         "GCS only", "gs://"),
        (NODE.replace("framework: tensorflow", "framework: jax"), 11, "trainer.framework", "JAX", "mode: vm"),
        (NODE.replace("  mode: node", "  mode: node\n  queued: true"), 6, "tpu.queued", "TPU VMs only", None),
        # scheduling, fallback zones, types of values
        (GOOD.replace("  type: v3-8", "  type: v3-8\n  spot: true\n  preemptible: true"), 6, "tpu.spot",
         "exclusive", None),
        (GOOD.replace("  type: v3-8", "  type: v3-8\n  zones: [us-central1-a]"), 6, "tpu.zones.0",
         "outside the region", None),
        (GOOD.replace("  type: v3-8", "  type: v3-8\n  preemptible: maybe"), 6, "tpu.preemptible", "boolean", None),
        (GOOD.replace("  setup: pip install -r requirements.txt", "  env: {1BAD: x}"), 13, "trainer.env",
         "not a valid environment variable", None),
        ("- just\n- a list\n", 1, None, "must be a YAML mapping", "tpuops init"),
    ],
)
def test_rule(tmp_path: Path, text: str, line: int | None, field: str | None, message: str,
              hint: str | None) -> None:
    error = error_for(tmp_path, text)
    assert error.path == str(tmp_path / "spec.yaml")
    assert error.line == line
    assert error.field == field
    assert message in error.message
    if hint:
        assert error.hint and hint in error.hint
    assert "\n" not in str(error)


def test_missing_required_key_names_it(tmp_path: Path) -> None:
    error = error_for(tmp_path, GOOD.replace("  command: python3 run_pretraining.py\n", ""))
    assert error.field == "trainer.command" and "required" in error.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found") as caught:
        load_spec(tmp_path / "nope.yaml")
    assert "tpuops init" in (caught.value.hint or "")


def test_bucket_location_elsewhere_is_allowed(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, GOOD.replace("  name: kcbert-data", "  name: kcbert-data\n  location: US")))
    assert spec.bucket and spec.bucket.location == "US"


def test_local_provider_needs_no_zone(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, "name: q\nprovider: local\ntpu: {type: v2-8, workers: 2}\n"))
    assert spec.zone == "local" and spec.tpu.workers == 2


@pytest.mark.parametrize(("name", "ok"), [("ab", False), ("a" * 64, False), ("my.bucket_1", True),
                                          ("-bad", False), ("goog-x", False), ("192.168.1.1", False)])
def test_bucket_names(name: str, ok: bool) -> None:
    assert (bucket_name_problem(name) is None) == ok


def test_region_of() -> None:
    assert region_of("europe-west4-a") == "europe-west4"
    assert region_of("us-central2-b") == "us-central2"


def warnings_for(tmp_path: Path, text: str) -> tuple[str, ...]:
    (tmp_path / "shards").mkdir(exist_ok=True)
    for script in ("train.py", "run_pretraining.py"):  # what the commands run, in code.path (else a warning too)
        (tmp_path / script).touch()
    return check_spec_file(write_spec(tmp_path, text)).warnings


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        # The catalog advises: a runtime, type or zone it does not list is the zone's to decide at `up`.
        (NODE.replace('"2.12.0"', "pytorch-1.8"), ":6: tpu.runtime:", "legacy Node version pytorch-1.8 is not in"),
        (GOOD.replace("tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.18.0-pjrt"), ":6: tpu.runtime:",
         "TPU VM runtime tpu-vm-tf-2.18.0-pjrt is not in"),
        (GOOD.replace("type: v3-8", "type: v7-8"), ":5: tpu.type:", "v7-8 is not in"),
        (GOOD.replace("type: v3-8", "type: v4-24").replace("europe-west4-a", "us-central2-b"), ":5: tpu.type:",
         "does not list v4-24"),
        (GOOD.replace("europe-west4-a", "us-central1-c"), ":3: zone:", "does not list v3 TPUs in zone us-central1-c"),
        (GOOD.replace("europe-west4-a", "mars-north9-z"), ":3: zone:", "zone mars-north9-z is unknown to"),
    ],
)
def test_what_the_catalog_does_not_list_is_a_warning(tmp_path: Path, text: str, where: str, words: str) -> None:
    warnings = warnings_for(tmp_path, text)
    assert len(warnings) == 1, warnings
    assert where in warnings[0] and words in warnings[0]
    assert f"as of {catalog.load().as_of}" in warnings[0] and "`up` will ask" in warnings[0]


def test_a_spec_the_catalog_knows_has_no_warnings(tmp_path: Path) -> None:
    assert warnings_for(tmp_path, GOOD) == ()


def test_missing_local_paths_are_warnings_until_push(tmp_path: Path) -> None:
    path = write_spec(tmp_path, GOOD.replace("code: ", "code: ") + "code: {path: ./src}\n")
    warnings = check_spec_file(path).warnings
    assert [w.split(": ", 2)[1] for w in warnings] == ["code.path", "data.0.from"]
    assert "data source ./shards does not exist" in warnings[1] and "before `tpuops push`" in warnings[1]


def test_spec_and_rules_import_in_one_direction() -> None:
    import ast

    import tpuops.spec

    tree = ast.parse(Path(tpuops.spec.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert "tpuops.rules" not in imported and "rules" not in names
