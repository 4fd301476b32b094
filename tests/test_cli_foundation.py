"""The CLI as a user runs it: init, plan, schema, one-line errors and exit codes, fast start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.test_spec import GOOD

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))


@pytest.mark.parametrize("template", ["trc-v3-tf", "pytorch-xla", "jax-pod", "legacy-node", "local"])
def test_init_then_plan(tmp_path: Path, template: str) -> None:
    (tmp_path / "shards").mkdir()
    (tmp_path / "tfrecords").mkdir()
    created = run_cli("init", "--template", template, "spec.yaml", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    first, second = (tmp_path / "spec.yaml").read_text().splitlines()[:2]
    assert first == "# yaml-language-server: $schema=tpuops.schema.json" and second.startswith("# tpuops spec")
    planned = run_cli("plan", "spec.yaml", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert "+ create" in planned.stdout and "Estimated cost" in planned.stdout


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "tpuops.yaml").write_text("mine")
    result = run_cli("init", cwd=tmp_path)
    assert result.returncode == 2 and "already exists" in result.stderr
    assert (tmp_path / "tpuops.yaml").read_text() == "mine"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_plans(example: Path) -> None:
    result = run_cli("plan", str(example))
    assert result.returncode == 0, result.stderr


def test_plan_json(tmp_path: Path) -> None:
    (tmp_path / "shards").mkdir()
    result = run_cli("plan", "--json", str(write_spec(tmp_path, GOOD)))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [a["kind"] for a in plan["actions"]] == ["bucket", "iam", "tpu"]
    assert plan["cost_per_hour"] == 8.0 and plan["region"] == "europe-west4"


def test_spec_error_is_one_line_exit_2(tmp_path: Path) -> None:
    path = write_spec(tmp_path, GOOD.replace("type: v3-8", "type: v3-9"))
    result = run_cli("plan", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"tpuops: error: {path}:5: tpu.type: v3-9 is not a v3 size")
    assert "hint: valid: v3-8, v3-32" in lines[0]


def test_missing_data_source_is_a_plan_warning(tmp_path: Path) -> None:
    result = run_cli("plan", str(write_spec(tmp_path, GOOD)))
    assert result.returncode == 0, result.stderr  # push refuses it (tests/test_offerings.py); plan only warns
    assert "warning: " in result.stdout and "data.0.from: data source ./shards does not exist" in result.stdout


def test_traceback_only_with_debug(tmp_path: Path) -> None:
    path = write_spec(tmp_path, "name: [")
    quiet = run_cli("plan", str(path))
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    loud = run_cli("plan", str(path), env={"TPUOPS_DEBUG": "1"})
    assert loud.returncode != 0 and "Traceback" in loud.stderr


def test_usage_error_exit_2() -> None:
    result = run_cli("plan")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["tpuops: error: plan: missing argument 'SPEC' (hint: see `tpuops plan -h`)"]


def test_schema_is_json_schema_with_the_contract_keys() -> None:
    result = run_cli("schema")
    schema = json.loads(result.stdout)
    assert set(schema["required"]) == {"name", "tpu"}
    for key in ("name", "project", "provider", "zone", "tpu", "client_vm", "bucket", "code", "data", "trainer", "logs"):
        assert key in schema["properties"]
    assert schema["additionalProperties"] is False


def test_help_and_plan_import_no_google_sdk(tmp_path: Path) -> None:
    (tmp_path / "shards").mkdir()
    path = write_spec(tmp_path, GOOD)
    probe = (
        "import sys\nfrom tpuops.cli.main import main\n"
        "main(['--help'])\n"
        "print('HELP_LOADED', sorted(m for m in sys.modules if m in ('tpuops.spec', 'tpuops.context', 'paramiko')))\n"
        f"main(['plan', {str(path)!r}])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('google', 'grpc', 'paramiko', 'tensorboard')))\n"
        "print('LOADED', loaded)\n"
    )
    result = run_cli_python(probe)
    # --help builds no spec models (the commands import their workflows lazily): start-up stays fast.
    assert "HELP_LOADED []" in result.stdout, result.stdout[-2000:]
    assert "\nLOADED []" in result.stdout, result.stdout[-2000:]


# What `tpuops --help` must not import: each costs 10-80 ms of start-up, and help needs none of them (the commands
# import their workflows, and rich its console, when they run).
HEAVY_AT_START = ("rich", "pydantic", "yaml", "paramiko", "cryptography", "tenacity", "pathspec", "google", "grpc",
                  "tensorboard", "numpy", "tpuops.ops", "tpuops.cloud", "tpuops.spec", "tpuops.context",
                  "tpuops.remote.ssh", "tpuops.remote.sync")


def test_help_imports_none_of_the_heavy_modules() -> None:
    probe = ("import sys\nfrom tpuops.cli.main import main\nmain(['--help'])\n"
             "print('MODULES', ' '.join(sorted(sys.modules)))\n")
    result = run_cli_python(probe)
    [line] = [line for line in result.stdout.splitlines() if line.startswith("MODULES ")]
    loaded = line.split()[1:]
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY_AT_START))
    assert heavy == [], heavy


def run_cli_python(code: str):  # noqa: ANN201
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
