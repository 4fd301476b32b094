"""`tpuops check` with the real frameworks on CPU under XLA: every template passes, and a ragged-batch variant
of a template fails, naming its step function and (where the framework reports them) the shapes that changed.

Heavy: each test skips when its framework is not installed (CI installs JAX, TensorFlow, torch + torch-xla).
Models and step counts are tiny: the suite runs on 2 cores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import require_module, run_cli, write_spec

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "data" / "quickstart.txt"
STEPS = "6"
TEMPLATES = {  # framework: (template, the flags that make its model tiny, the module it needs)
    "jax": ("jax", "--dim 32 --layers 1 --heads 2 --block-size 32 --batch-size 4", "jax"),
    "pytorch": ("pytorch_xla", "--dim 32 --layers 1 --heads 2 --block-size 32 --batch-size 4", "torch_xla"),
    "tensorflow": ("tensorflow", "--dim 32 --layers 1 --heads 2 --max-len 64 --batch-size 4", "tensorflow"),
}
RAGGED = {  # the template's line that makes fixed-size blocks, and a ragged one (length varies with the step)
    "jax": ("np.arange(args.block_size + 1)[None, :]", "np.arange(args.block_size + 1 - step % 5)[None, :]"),
    "pytorch": ("tokens[s : s + args.block_size + 1]", "tokens[s : s + args.block_size + 1 - step % 5]"),
}


def check_template(tmp_path: Path, framework: str, code: Path | None = None) -> tuple[int, dict]:
    template, flags, module = TEMPLATES[framework]
    require_module(module)
    spec = write_spec(tmp_path, f"""
        name: check-{framework}
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        bucket: {{name: check-data}}
        code: {{path: {code or ROOT / "templates" / template}}}
        data:
          - {{from: {CORPUS}, to: gs://check-data/corpus/train.txt}}
        trainer:
          framework: {framework}
          command: python3 train.py --data gs://check-data/corpus/train.txt {flags} --steps 1000
        """)
    result = run_cli("check", str(spec), "--steps", STEPS, "--timeout", "4m", "--json", timeout=300)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.mark.heavy
@pytest.mark.parametrize("framework", list(TEMPLATES))
def test_template_passes_check(tmp_path: Path, framework: str) -> None:
    code, report = check_template(tmp_path, framework)
    assert (code, report["findings"]) == (0, [])
    run = report["run"]
    assert run["exit_code"] == 0 and not run["timed_out"]
    assert 1 <= run["compilations"] <= 3  # the step compiled (and not again and again)


def ragged_copy(tmp_path: Path, framework: str) -> Path:
    template = ROOT / "templates" / TEMPLATES[framework][0]
    code = tmp_path / "ragged"
    shutil.copytree(template, code)
    fixed, ragged = RAGGED[framework]
    source = (code / "train.py").read_text()
    assert source.count(fixed) == 1, "the template changed: update RAGGED"
    (code / "train.py").write_text(source.replace(fixed, ragged))
    return code


@pytest.mark.heavy
def test_a_ragged_jax_trainer_fails_naming_its_step_and_the_shapes(tmp_path: Path) -> None:
    code, report = check_template(tmp_path, "jax", ragged_copy(tmp_path, "jax"))
    assert code == 1
    [storm] = report["findings"]
    assert (storm["rule"], storm["file"]) == ("XLA101", "train.py")
    assert "`step_fn` was compiled 5 times in 6 steps" in storm["message"]
    assert storm["details"][0].endswith("int32[4,33] -> int32[4,32]")  # the batch, one token shorter
    assert "pad" in storm["hint"]


@pytest.mark.heavy
def test_a_ragged_pytorch_xla_trainer_fails_naming_its_step(tmp_path: Path) -> None:
    code, report = check_template(tmp_path, "pytorch", ragged_copy(tmp_path, "pytorch"))
    assert code == 1
    storms = [f for f in report["findings"] if f["rule"] == "XLA101"]
    assert [f["file"] for f in storms] == ["train.py"]
    assert storms[0]["message"].startswith("`train_step` was compiled")
