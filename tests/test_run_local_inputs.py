"""`run` checks what it needs from this machine before it creates anything (the local provider stands for the
cloud: a created "TPU" is a worker directory), and says what it leaves up when a later step fails."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec

SPEC = """
name: inputs
provider: local
tpu: {{type: v2-8, workers: 1}}
code: {{path: {code}}}
trainer:
  framework: jax
  {setup}command: python3 train.py
"""


def nothing_created(home: Path) -> bool:
    workers = home / "local" / "workers"
    return not (home / "clusters" / "inputs" / "state.json").exists() and not (
        workers.exists() and any(workers.iterdir()))


def spec_with(directory: Path, code: str, setup: str = "") -> Path:
    return write_spec(directory, SPEC.format(code=code, setup=f"setup: {setup}\n  " if setup else ""))


def test_a_missing_code_directory_stops_run_before_up(tmp_path: Path, tpuops_home: Path) -> None:
    done = run_cli("run", str(spec_with(tmp_path, "trainr")))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "spec.yaml:4: code.path: code directory trainr does not exist" in lines[0], lines
    assert nothing_created(tpuops_home)


def test_a_file_given_as_code_path_stops_run_before_up(tmp_path: Path, tpuops_home: Path) -> None:
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "train.py").write_text("print('hi')\n")
    done = run_cli("run", str(spec_with(tmp_path, "trainer/train.py")))
    assert done.returncode == 2, done.stderr
    assert "code.path: trainer/train.py is a file" in done.stderr and "path: trainer" in done.stderr
    assert nothing_created(tpuops_home)


def test_a_bad_ignore_pattern_stops_run_before_up(tmp_path: Path, tpuops_home: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    (tmp_path / "code" / ".tpuopsignore").write_text("*.ckpt\n!\n")
    done = run_cli("run", str(spec_with(tmp_path, "code")))
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and ".tpuopsignore:2" in done.stderr, done.stderr
    assert nothing_created(tpuops_home)


# Root reads everything: the CLI runs as root without the capabilities that let it ignore file modes, as a
# user whose code directory holds a file only its owner may read.
WITHOUT_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_an_unreadable_file_stops_run_before_up(tmp_path: Path, tpuops_home: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "secret.key").write_text("nobody may read this\n")
    (code / "secret.key").chmod(0o000)
    done = run_cli("run", str(spec_with(tmp_path, "code")), timeout=60, prefix=WITHOUT_DAC)
    assert done.returncode == 2, done.stderr
    assert "cannot read" in done.stderr and "secret.key" in done.stderr and "code.exclude" in done.stderr
    assert nothing_created(tpuops_home)


def test_a_failed_step_after_up_says_what_stays_up(tmp_path: Path, tpuops_home: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    spec = spec_with(tmp_path, "code", setup="exit 7")
    try:
        done = run_cli("run", str(spec))
        assert done.returncode == 1, done.stderr
        assert "setup failed" in done.stderr
        assert "the cluster inputs is still up" in done.stderr and "`tpuops down inputs`" in done.stderr
        assert run_cli("status", "inputs").returncode == 0
    finally:
        run_cli("down", "inputs", "--yes")
    torn = run_cli("run", str(spec), "--down")
    assert torn.returncode == 1, torn.stderr
    assert "the cluster inputs was deleted" in torn.stderr
    assert nothing_created(tpuops_home)


def preflight_spec(tmp_path: Path, train_py: str) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(train_py)
    return spec_with(tmp_path, "code").parent / "spec.yaml"


def test_run_preflight_stops_at_the_lint_finding_without_running_the_trainer(tmp_path: Path,
                                                                             tpuops_home: Path) -> None:
    marker = tmp_path / "trainer-ran"
    spec = preflight_spec(tmp_path, f"import torch_xla.core.xla_model as xm\nopen({str(marker)!r}, 'w')\n"
                                    "for x in loader:\n    loss = model(x).sum()\n    loss.backward()\n"
                                    "    xm.optimizer_step(optimizer)\n    print(loss.item())\n")
    done = run_cli("run", str(spec), "--preflight", timeout=60)
    assert done.returncode == 1, done.stderr
    assert "preflight: train.py:7: XLA003 host-sync" in done.stderr  # a read in the step loop's body
    assert not marker.exists()  # the lint decided: the trainer never ran
    assert nothing_created(tpuops_home)


def test_run_preflight_shows_the_trainers_output_as_it_runs(tmp_path: Path, tpuops_home: Path) -> None:
    spec = preflight_spec(tmp_path, "import os\nprint('preflight steps', os.environ.get('TPUOPS_MAX_STEPS'))\n")
    try:
        done = run_cli("run", str(spec), "--preflight", timeout=120)
        assert done.returncode == 0, done.stderr
        assert "[preflight] preflight steps 20" in done.stdout, done.stdout
    finally:
        run_cli("down", "inputs", "--yes")
