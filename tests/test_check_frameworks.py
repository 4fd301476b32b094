"""`tpuops check` with the real frameworks on CPU under XLA (that every template passes is test_check_examples'
job: each shipped example runs one): a ragged-batch variant of a template and trainers of the corpus
(tests/check_corpus) fail, naming the step function, the argument paths and shapes that changed (JAX, TensorFlow),
the compilations as the framework counted them, the steps that really ran and a tensor read after every step
(PyTorch/XLA counters).

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
STEPS = "4"
TEMPLATES = {  # framework: (template, the flags that make its model tiny, the module it needs)
    "pytorch": ("pytorch_xla", "--dim 32 --layers 1 --heads 2 --block-size 32 --batch-size 4", "torch_xla"),
}
RAGGED = {  # the template's line that makes fixed-size blocks, and a ragged one (length varies with the step):
    # four lengths in four steps, one more than a storm needs (compiles.RECOMPILE_LIMIT)
    "pytorch": ("tokens[s : s + args.block_size + 1]", "tokens[s : s + args.block_size + 1 - step % 4]"),
}
CHECK_CORPUS = ROOT / "tests" / "check_corpus"


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


def one_file_trainer(tmp_path: Path, framework: str, source: str, files: dict[str, str] | None = None) -> Path:
    """A spec whose trainer is `train.py` holding `source`, beside `files` (name -> text) in its code directory."""
    code = tmp_path / "trainer"
    code.mkdir()
    for name, text in {"train.py": source, **(files or {})}.items():
        (code / name).write_text(text)
    return write_spec(tmp_path, f"""
        name: check-{framework}-trainer
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        code: {{path: {code}}}
        trainer: {{framework: {framework}, command: python3 train.py}}
        """)


def ragged_copy(tmp_path: Path, framework: str) -> Path:
    template = ROOT / "templates" / TEMPLATES[framework][0]
    code = tmp_path / "ragged"
    shutil.copytree(template, code)
    fixed, ragged = RAGGED[framework]
    source = (code / "train.py").read_text()
    assert source.count(fixed) == 1, "the template changed: update RAGGED"
    (code / "train.py").write_text(source.replace(fixed, ragged))
    return code


def check_corpus_trainer(tmp_path: Path, framework: str, code: Path, steps: int) -> tuple[int, dict]:
    spec = write_spec(tmp_path, f"""
        name: check-corpus
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        code: {{path: {code}}}
        trainer: {{framework: {framework}, command: python3 train.py}}
        """)
    result = run_cli("check", str(spec), "--steps", str(steps), "--timeout", "4m", "--json", timeout=300)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.mark.heavy
def test_a_jax_trainer_with_short_batches_names_the_argument_paths(tmp_path: Path) -> None:
    require_module("jax")
    code, report = check_corpus_trainer(tmp_path, "jax", CHECK_CORPUS / "jax_dict_batch_ragged", 12)
    assert code == 1
    [storm] = report["findings"]
    assert (storm["rule"], storm["file"], storm["line"]) == ("XLA101", "train.py", 14)
    # 64-image batches, then the epoch's short last one (58), then 56-image batches: JAX's own account
    assert "`train_step` was compiled 5 times in 12 steps" in storm["message"]
    assert storm["details"][:2] == [
        "batch['image']: float32[64,28,28,1] -> float32[58,28,28,1]; batch['label']: int32[64] -> int32[58]",
        "batch['image']: float32[58,28,28,1] -> float32[56,28,28,1]; batch['label']: int32[58] -> int32[56]"]
    assert report["run"]["compilations"] == 5  # as many as JAX logged for train_step
    assert report["run"]["steps_ran"] is None  # it writes no scalars: said, not guessed
    assert report["steps_found"][0]["name"] == "train_step"


@pytest.mark.heavy
def test_a_tensorflow_trainer_with_short_batches_counts_what_tensorflow_compiled(tmp_path: Path) -> None:
    require_module("tensorflow")
    code, report = check_corpus_trainer(tmp_path, "tensorflow", CHECK_CORPUS / "tf_custom_loop_short_batches", 8)
    assert code == 1
    run = report["run"]
    # Batches of 16, 16, the epoch's short last one (4), then 12, 12, 12, 8, 8: four shapes, four XLA programs,
    # as TensorFlow itself counted them (its "#called" of XLA compilations in the process).
    assert run["compilations"] == run["counters"]["xla_compilations"] == 4
    assert (run["steps"], run["steps_ran"], run["ignored_max_steps"]) == (8, 8, False)
    assert run["steps_ran_source"] == "its TensorBoard scalars reach step 8"
    [storm] = report["findings"]
    assert (storm["rule"], storm["file"], storm["line"]) == ("XLA101", "train.py", 23)
    assert "`train_step` was compiled 4 times in 8 steps" in storm["message"]
    assert storm["details"] == ["arg 0: float32[16,8] -> float32[4,8]; arg 1: int32[16] -> int32[4]",
                                "arg 0: float32[4,8] -> float32[12,8]; arg 1: int32[4] -> int32[12]",
                                "arg 0: float32[12,8] -> float32[8,8]; arg 1: int32[12] -> int32[8]"]


@pytest.mark.heavy
def test_a_pytorch_xla_trainer_reading_loss_every_step_and_ignoring_max_steps(tmp_path: Path) -> None:
    require_module("torch_xla")
    code = tmp_path / "trainer"
    shutil.copytree(CHECK_CORPUS / "xla_train_one_step_method", code)
    source = (code / "train.py").read_text()
    honest = 'Trainer(max_steps=int(os.environ.get("TPUOPS_MAX_STEPS", "200")))'
    assert source.count(honest) == 1, "the corpus trainer changed: update this test"
    (code / "train.py").write_text(source.replace(honest, "Trainer(max_steps=8)"))
    exit_code, report = check_corpus_trainer(tmp_path, "pytorch", code, 3)
    assert exit_code == 1
    run = report["run"]
    assert (run["steps"], run["steps_ran"], run["ignored_max_steps"]) == (3, 8, True)
    assert report["notes"] == ["the trainer ran 8 steps (torch_xla's MarkStep counter): it ignored "
                               "TPUOPS_MAX_STEPS=3"]
    assert run["compilations"] == run["counters"]["UncachedCompile"] == 1  # one graph, cached after
    rules = {(f["rule"], f["line"]) for f in report["findings"]}
    assert ("XLA003", 50) in rules  # the lint: `running += loss.item()` after the step ends
    [read] = [f for f in report["findings"] if f["rule"] == "XLA103"]
    assert "in 7 of 7 steps" in read["message"]  # the run: a transfer after every step end, no new graph


@pytest.mark.heavy
def test_a_ragged_pytorch_xla_trainer_fails_naming_its_step(tmp_path: Path) -> None:
    code, report = check_template(tmp_path, "pytorch", ragged_copy(tmp_path, "pytorch"))
    assert code == 1
    storms = [f for f in report["findings"] if f["rule"] == "XLA101"]
    assert [f["file"] for f in storms] == ["train.py"]
    assert storms[0]["message"].startswith("`train_step` was compiled")


@pytest.mark.heavy
def test_keras_fit_over_padded_batch_is_a_storm_by_tensorflows_own_count(tmp_path: Path) -> None:
    require_module("tensorflow")
    code, report = check_corpus_trainer(tmp_path, "tensorflow", CHECK_CORPUS / "keras_fit_padded_batch", 20)
    assert code == 1
    by_rule = {f["rule"]: f for f in report["findings"]}
    assert (by_rule["XLA004"]["file"], by_rule["XLA004"]["line"]) == ("train.py", 38)  # the lint: no padded_shapes
    storm = by_rule["XLA101"]  # the run: Keras's own train function, compiled per batch length
    compiled = report["run"]["counters"]["xla_compilations"]
    assert compiled > 3 and f"TensorFlow compiled {compiled} XLA programs in 20 steps" in storm["message"]
    assert "`one_step_on_data`" in storm["message"]
    assert storm["details"][0].startswith("arg 0: int32[8,")


JAX_CRASHING = '''
import jax
import jax.numpy as jnp


@jax.jit
def step(x):
    return x.reshape((3, -1)).sum()


print("trainer: first step", step(jnp.ones(6)), flush=True)
print("trainer: second step, one more element", flush=True)
step(jnp.ones(7))
'''


@pytest.mark.heavy
def test_a_crashing_jax_trainer_shows_its_output_and_its_error(tmp_path: Path) -> None:
    """JAX_EXPLAIN_CACHE_MISSES explains the second call's new shape; the trainer's lines and traceback after
    that explanation are the trainer's, shown as it runs and in the failure."""
    require_module("jax")
    spec = one_file_trainer(tmp_path, "jax", JAX_CRASHING)
    result = run_cli("check", str(spec), "--steps", "2", "--timeout", "2m", timeout=180)
    assert result.returncode == 1, result.stderr
    shown = [line[2:] for line in result.stderr.splitlines() if line.startswith("| ")]
    assert "trainer: second step, one more element" in shown
    assert "Traceback (most recent call last):" in shown
    failed = next(line for line in result.stdout.splitlines() if "XLA104 trainer-failed" in line)
    assert "TypeError: cannot reshape array of shape (7,)" in result.stdout, failed


SETTLED_BY_THE_RUN = '''
import json
import os

import torch
import torch_xla.core.xla_model as xm

config = json.load(open("config.json"))
device = xm.xla_device()
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(os.environ.get("TPUOPS_MAX_STEPS", "100"))):
    loss = model(torch.ones(8, 4, device=device)).pow(2).mean()
    loss.backward()
    xm.optimizer_step(optimizer, barrier=True)
    if config["debug"]:
        print("loss", loss.item())
for batch in range(4):
    out = model(torch.ones(8, 4, device=device))
    print("eval", out.sum().item())
'''


@pytest.mark.heavy
def test_the_run_sets_aside_what_it_never_ran_and_confirms_what_ran_every_step(tmp_path: Path) -> None:
    """The source cannot tell that config.json switches the debug read off (a finding: set aside by the run,
    which never ran it), nor that the loop after training runs the model per batch (a note: confirmed)."""
    require_module("torch_xla")
    spec = one_file_trainer(tmp_path, "pytorch", SETTLED_BY_THE_RUN, {"config.json": '{"debug": false}'})
    lint = json.loads(run_cli("check", str(spec), "--no-run", "--json").stdout)
    assert [(f["rule"], f["line"]) for f in lint["findings"]] == [("XLA003", 17)]
    assert [(n["rule"], n["line"]) for n in lint["advice"]] == [("XLA003", 20)]
    result = run_cli("check", str(spec), "--steps", "5", "--timeout", "3m", "--json", timeout=240)
    report = json.loads(result.stdout)
    run = report["run"]
    assert (run["exit_code"], run["lines_counted"], run["lint_set_aside"], run["lint_confirmed"]) == (0, True, 1, 1)
    assert [(f["rule"], f["line"]) for f in report["findings"] if f["rule"] == "XLA003"] == [("XLA003", 20)]
    confirmed = report["findings"][0]["message"]
    assert confirmed.endswith("(the preflight ran it on 4 of 4 iterations of its loop)")
    [aside] = [n for n in report["advice"] if n["line"] == 17]
    assert aside["message"].endswith("(the preflight ran 5 step(s) and its step, never this line)")
    assert result.returncode == 1


JAX_BRANCH_ON_A_TRACER = '''
import jax
import jax.numpy as jnp


@jax.jit
def step(x, scale):
    if scale > 1:  # scale: traced here, so JAX raises while tracing
        return x * scale
    return x


print(step(jnp.ones(4), 2.0))
'''


@pytest.mark.heavy
def test_a_jax_branch_the_lint_could_only_guess_is_a_finding_once_the_run_fails_there(tmp_path: Path) -> None:
    require_module("jax")
    spec = one_file_trainer(tmp_path, "jax", JAX_BRANCH_ON_A_TRACER)
    lint = json.loads(run_cli("check", str(spec), "--no-run", "--json").stdout)
    assert lint["findings"] == [] and [(n["rule"], n["line"]) for n in lint["advice"]] == [("XLA001", 8)]
    result = run_cli("check", str(spec), "--steps", "2", "--timeout", "2m", "--json", timeout=180)
    report = json.loads(result.stdout)
    assert [(f["rule"], f["line"]) for f in report["findings"]] == [("XLA001", 8), ("XLA104", None)]
    assert report["findings"][0]["message"].endswith("(the preflight failed here)")
    assert report["run"]["lint_confirmed"] == 1 and report["advice"] == []
    assert result.returncode == 1
