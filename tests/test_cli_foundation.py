"""The CLI as a user runs it: init, plan, schema, one-line errors and exit codes, fast start."""

from __future__ import annotations

import json
import re
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


def test_the_local_template_runs_as_written_in_an_empty_directory(tmp_path: Path, tpuops_home: Path) -> None:
    """`tpuops init --template local x.yaml && tpuops run x.yaml`: the trainer its command runs is written beside
    it, and needs nothing beyond what tpuops installs (no JAX, whatever `framework:` says)."""
    import ast
    import sys

    created = run_cli("init", "--template", "local", "x.yaml", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tpuops.schema.json", "train.py", "x.yaml"]
    assert "train.py (the trainer its command runs)" in created.stdout
    tree = ast.parse((tmp_path / "train.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "numpy", "tensorboard"}, imported
    planned = run_cli("plan", "x.yaml", cwd=tmp_path)
    assert planned.returncode == 0 and "warning" not in planned.stdout + planned.stderr, planned.stdout
    try:
        ran = run_cli("run", "x.yaml", cwd=tmp_path, timeout=180)
        assert ran.returncode == 0, ran.stderr[-3000:]
        fitted = re.findall(r"^\[w(\d)\] done: y = ([\d.]+) x \+ ([\d.]+)$", ran.stdout, re.MULTILINE)
        assert sorted(worker for worker, _, _ in fitted) == ["0", "1"], ran.stdout
        assert all(abs(float(w) - 3) < 0.1 and abs(float(b) - 2) < 0.1 for _, w, b in fitted), fitted
        assert "[scalars]" in ran.stdout and "learning_rate" in ran.stdout, ran.stdout
    finally:
        gone = run_cli("down", "my-local", "--yes", "--delete-bucket", "--force")
    assert gone.returncode == 0, gone.stderr


def test_init_keeps_a_trainer_that_is_there_and_plan_says_when_the_script_is_missing(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('mine')\n")
    created = run_cli("init", "--template", "local", "x.yaml", cwd=tmp_path)
    assert created.returncode == 0 and "train.py was there already and is kept" in created.stdout, created.stdout
    assert (tmp_path / "train.py").read_text() == "print('mine')\n"
    (tmp_path / "train.py").unlink()
    planned = run_cli("plan", "x.yaml", cwd=tmp_path)
    warnings = [line for line in planned.stdout.splitlines() if line.startswith("warning:")]
    assert planned.returncode == 0 and warnings == [
        "warning: x.yaml:17: trainer.command: runs train.py, which is not in code.path (.) (write it there before "
        "`tpuops run` or `push`, or fix the command: it runs in the pushed code directory on every worker)"], warnings


@pytest.mark.parametrize(("command", "script"), [
    ("python3 train.py --lr 1", "train.py"), ("python -u src/train.py", "src/train.py"),
    ("cd x && /usr/bin/python3.11 main.py", "main.py"), ("bash run.sh", None), ("python3 -c 'print(1)'", None),
    ("python3 $HOME/train.py", None), ("python3 /opt/train.py", None), ("echo 'unbalanced", None),
])
def test_the_script_a_command_runs(command: str, script: str | None) -> None:
    from tpuops.rules import command_script

    assert command_script(command) == script


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
