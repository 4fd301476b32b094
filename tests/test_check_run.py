"""`tpuops check` as users run it, with small trainers that need no framework: the workspace and environment
the trainer gets, the timeout ending its whole process group, failures as one finding, exit codes, --json, and
`run --preflight` stopping before anything is created.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec


def spec_for(tmp_path: Path, command: str, framework: str = "jax", extra: str = "") -> Path:
    return write_spec(tmp_path, f"""
        name: check-test
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        bucket: {{name: check-test-data}}
        code: {{path: code, exclude: ["notes/"]}}
        data:
          - {{from: corpus.txt, to: gs://check-test-data/corpus/train.txt}}
          - {{from: corpus.txt, to: data/corpus.txt}}
        trainer:
          framework: {framework}
          command: {command}
        {extra}
        """)


def code_dir(tmp_path: Path, train_py: str) -> Path:
    code = tmp_path / "code"
    (code / "notes").mkdir(parents=True)
    (code / "train.py").write_text(textwrap.dedent(train_py))
    (code / "notes" / "draft.py").write_text("import torch\nx = torch.zeros(1).half()\n")
    (tmp_path / "corpus.txt").write_text("hello tpu\n")
    return code


def test_the_trainer_runs_in_a_copy_with_the_preflight_environment_and_the_data(tmp_path: Path) -> None:
    code = code_dir(tmp_path, """
        import json, os, sys
        env = {k: os.environ.get(k) for k in ("TPUOPS_PREFLIGHT", "TPUOPS_MAX_STEPS", "TPUOPS_NUM_WORKERS",
                                              "JAX_PLATFORMS", "JAX_LOG_COMPILES", "CUDA_VISIBLE_DEVICES",
                                              "TPUOPS_CHECK_LINES_ROOT")}
        texts = [open(path).read() for path in sys.argv[1:]]
        open("written-by-trainer.txt", "w").write("x")
        print(json.dumps({"env": env, "texts": texts, "notes": os.path.exists("notes"),
                          "logdir": os.path.isdir(os.environ["TPUOPS_LOGDIR"])}))
        """)
    spec = spec_for(tmp_path, "python3 train.py gs://check-test-data/corpus/train.txt ~/data/corpus.txt")
    result = run_cli("check", str(spec), "--steps", "7")
    assert result.returncode == 0, result.stdout + result.stderr
    seen = json.loads(next(line[2:] for line in result.stderr.splitlines() if line.startswith("| {")))
    assert seen["env"] == {"TPUOPS_PREFLIGHT": "1", "TPUOPS_MAX_STEPS": "7", "TPUOPS_NUM_WORKERS": "1",
                           "JAX_PLATFORMS": "cpu", "JAX_LOG_COMPILES": "1", "CUDA_VISIBLE_DEVICES": "",
                           "TPUOPS_CHECK_LINES_ROOT": None}  # no lint finding or note to settle: no line counts
    assert seen["texts"] == ["hello tpu\n", "hello tpu\n"]
    assert seen["notes"] is False and seen["logdir"] is True  # the copy holds what push sends, nothing else
    assert not (code / "written-by-trainer.txt").exists()
    # No compiled step in this trainer: not "clean", since the step rules had nothing to look at.
    assert "check: no compiled step recognised: rules XLA001-003 were not applied (1 file(s) linted; ran" \
        in result.stdout


def test_timeout_ends_the_trainers_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code_dir(tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("training forever", flush=True)
        time.sleep(600)
        """)
    spec = spec_for(tmp_path, "python3 train.py")
    result = run_cli("check", str(spec), "--timeout", "4s", "--json", timeout=60)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert [f["rule"] for f in report["findings"]] == ["XLA105"]
    assert report["findings"][0]["details"] == ["training forever"]
    assert report["run"]["timed_out"] is True
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the trainer's child outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_a_trainer_that_cannot_start_is_one_finding_with_its_error(tmp_path: Path) -> None:
    code_dir(tmp_path, "import not_a_module_tpuops_knows\n")
    result = run_cli("check", str(spec_for(tmp_path, "python3 train.py")), "-q")
    assert result.returncode == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith("XLA104 trainer-failed: the trainer exited with code 1: ModuleNotFoundError: "
                            "No module named 'not_a_module_tpuops_knows'"), result.stdout
    assert "tpuops: error" not in result.stderr


# a loss read to the host in the body of a PyTorch/XLA step loop: a finding the source alone is sure of
READ_EVERY_STEP = "import torch_xla.core.xla_model as xm\n\nfor x in loader:\n    loss = model(x).sum()\n" \
    "    loss.backward()\n    xm.optimizer_step(optimizer)\n    print(loss.item())\n"


def test_no_run_lints_only_and_lint_findings_exit_1(tmp_path: Path) -> None:
    code_dir(tmp_path, READ_EVERY_STEP)
    result = run_cli("check", str(spec_for(tmp_path, "python3 -c 'raise SystemExit(3)'")), "--no-run")
    assert result.returncode == 1
    assert result.stdout.startswith("train.py:7: XLA003 host-sync: `.item()`"), result.stdout
    assert "ran" not in result.stdout  # --no-run: the failing command was never started


def test_the_lint_reads_what_the_command_runs_and_says_what_it_left_out(tmp_path: Path) -> None:
    code = code_dir(tmp_path, "import model\nprint(model.net)\n")
    (code / "model.py").write_text("import torch\nnet = torch.nn.Linear(2, 2).half()\n")
    (code / "train_gpu.py").write_text("import torch\nnet = torch.nn.Linear(2, 2).cuda().half()\n")
    result = run_cli("check", str(spec_for(tmp_path, "python3 train.py --steps 10", "pytorch")), "--no-run")
    assert result.returncode == 0  # float16 in a module the script imports, not in it: a note, which does not fail
    assert result.stdout.startswith("model.py:2: note XLA005 fp16: `.half()`"), result.stdout
    assert "train_gpu.py" not in result.stdout
    assert "(2 file(s) linted: train.py and what it imports; 1 other(s) left out)" in result.stdout
    report = json.loads(run_cli("check", str(spec_for(tmp_path, "python3 train.py", "pytorch")), "--no-run",
                                "--json").stdout)
    assert report["scripts"] == ["train.py"] and report["files_not_run"] == ["train_gpu.py"]
    unknown = run_cli("check", str(spec_for(tmp_path, "my-installed-trainer --steps 10", "pytorch")), "--no-run")
    assert "every file linted: the command runs no Python file of the code directory" in unknown.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    code_dir(tmp_path, "print('ok')\n")
    spec = spec_for(tmp_path, "python3 train.py")
    for args, text in [(["missing.yaml"], "spec file missing.yaml not found"),
                       ([str(spec), "--timeout", "soon"], "cannot read duration 'soon'"),
                       ([str(spec), "--steps", "0"], "--steps must be at least 1")]:
        result = run_cli("check", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith(f"tpuops: error: {text}") or text in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_the_specs_check_section_is_recorded_and_checked_strictly(tmp_path: Path) -> None:
    code_dir(tmp_path, "print('ok')\n")
    spec = spec_for(tmp_path, "python3 train.py --layers 48", extra="check: {command: python3 train.py --layers 2}")
    result = run_cli("check", str(spec), "--steps", "2", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["run"]["command"] == "python3 train.py --layers 2"
    bad = spec_for(tmp_path, "python3 train.py", extra="check: {command: python3 train.py, steps: 3}")
    result = run_cli("check", str(bad), "--no-run")
    assert result.returncode == 2
    assert "check.steps" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_check_sections_command_and_env_reach_the_trainer(tmp_path: Path) -> None:
    code_dir(tmp_path, """
        import os, sys
        print("seen", " ".join(sys.argv[1:]), os.environ.get("MODEL_SIZE"), os.environ.get("DATA_AT"), flush=True)
        """)
    spec = spec_for(tmp_path, "python3 train.py --layers 48", extra="""
        check:
          command: python3 train.py --layers 2
          env: {MODEL_SIZE: toy, DATA_AT: gs://check-test-data/corpus}
        """)
    result = run_cli("check", str(spec), "--steps", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    [seen] = [line for line in result.stderr.splitlines() if line.startswith("| seen")]
    assert seen.startswith("| seen --layers 2 toy /") and seen.endswith("/bucket/check-test-data/corpus"), seen


def test_notes_are_shown_and_do_not_fail_the_check(tmp_path: Path) -> None:
    code_dir(tmp_path, """
        import jax

        step = jax.jit(lambda x: x * 2)
        x = 1.0
        for i in range(10):
            x = step(x)
            print(float(x))
        """)
    spec = spec_for(tmp_path, "python3 train.py")
    result = run_cli("check", str(spec), "--no-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("train.py:8: note XLA003 host-sync: `float()` of `x` (what `step` returned)")
    assert "check: 1 note(s) to confirm (" in result.stdout
    report = json.loads(run_cli("check", str(spec), "--no-run", "--json").stdout)
    assert report["ok"] is True and [a["line"] for a in report["advice"]] == [8]


def test_notes_on_code_the_command_does_not_run_are_counted_and_listed_on_demand(tmp_path: Path) -> None:
    """A read in a function the command's code never names is a note (a config may still call it), but one of
    dozens in a big repository: the report counts them in one line and lists them with --all-notes."""
    code = code_dir(tmp_path, """
        import torch_xla.core.xla_model as xm
        from debug_tools import show_losses

        for batch in loader:
            loss = model(batch).sum()
            loss.backward()
            xm.optimizer_step(optimizer)
        """)
    (code / "debug_tools.py").write_text("import torch_xla.core.xla_model as xm\n\n\ndef show_losses(loader):\n"
                                         "    for x in loader:\n        loss = model(x).sum()\n"
                                         "        xm.mark_step()\n        print(loss.item())\n")
    spec = spec_for(tmp_path, "python3 train.py")
    result = run_cli("check", str(spec), "--no-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "note XLA003" not in result.stdout
    assert "1 note(s) in code the command does not seem to run (debug_tools.py): `--all-notes` lists them" \
        in result.stdout
    assert "check: 1 note(s) in code not run (" in result.stdout
    listed = run_cli("check", str(spec), "--no-run", "--all-notes")
    assert listed.stdout.startswith("debug_tools.py:8: note XLA003 host-sync: `.item()`"), listed.stdout
    assert "no code the command runs names show_losses" in listed.stdout
    assert "check: 1 note(s) to confirm (" in listed.stdout
    report = json.loads(run_cli("check", str(spec), "--no-run", "--json").stdout)
    assert report["advice"] == [] and [(n["file"], n["line"]) for n in report["unreached"]] == [("debug_tools.py", 8)]


def test_run_preflight_stops_before_anything_is_created(tmp_path: Path, tpuops_home: Path) -> None:
    code_dir(tmp_path, READ_EVERY_STEP)
    spec = spec_for(tmp_path, "python3 train.py")
    result = run_cli("run", str(spec), "--preflight")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "tpuops: error: preflight: train.py:7: XLA003 host-sync: `.item()`"), result.stderr
    assert not (tpuops_home / "clusters").exists() or not any((tpuops_home / "clusters").iterdir())


def test_a_trainer_without_a_recognised_step_is_not_called_clean(tmp_path: Path) -> None:
    code_dir(tmp_path, """
        import torch

        def main(loader):
            model = torch.nn.Linear(8, 1)
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                print(loss.item())
        """)
    spec = spec_for(tmp_path, "python3 train.py")
    shown = run_cli("check", str(spec), "--no-run")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "check: no compiled step recognised: rules XLA001-003 were not applied " \
        "(1 file(s) linted)"
    report = json.loads(run_cli("check", str(spec), "--no-run", "--json").stdout)
    assert report["steps_found"] == []
    assert report["notes"] == ["no compiled step recognised: rules XLA001-003 were not applied"]


def test_the_summary_and_json_name_the_steps_found(tmp_path: Path) -> None:
    code = code_dir(tmp_path, """
        import jax
        from steps import train_step

        step = jax.jit(train_step)
        """)
    (code / "steps.py").write_text("def train_step(state, batch):\n    return state, batch.sum()\n")
    spec = spec_for(tmp_path, "python3 train.py")
    shown = run_cli("check", str(spec), "--no-run")
    assert shown.stdout.strip() == "check: clean (2 file(s) linted, 1 compiled step(s): train_step (jax.jit))"
    report = json.loads(run_cli("check", str(spec), "--no-run", "--json").stdout)
    assert report["steps_found"] == [{"name": "train_step", "framework": "JAX", "how": "jax.jit",
                                      "file": "steps.py", "line": 1}]
    assert report["notes"] == [] and report["ok"] is True


def test_a_trainer_that_runs_past_max_steps_is_named_by_its_scalars(tmp_path: Path) -> None:
    from tests.logs_writers import event_file_name, framed, simple_event

    code = code_dir(tmp_path, """
        import os, shutil
        # ignores TPUOPS_MAX_STEPS: "trains" 546 steps and logs them where TPUOPS_LOGDIR says
        shutil.copy("events.bin", os.path.join(os.environ["TPUOPS_LOGDIR"], EVENTS))
        """.replace("EVENTS", repr(event_file_name())))
    (code / "events.bin").write_bytes(framed(*(simple_event(s, {"loss": 1.0 / s}) for s in (1, 100, 546))))
    result = run_cli("check", str(spec_for(tmp_path, "python3 train.py")), "--steps", "20", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check: no compiled step recognised: rules XLA001-003 were not applied; the trainer ran 546 steps (its " \
        "TensorBoard scalars reach step 546): it ignored TPUOPS_MAX_STEPS=20 (" in result.stdout
    assert "ran jax trainer on CPU under XLA: 546 steps, exit 0" in result.stdout
    report = json.loads(run_cli("check", str(spec_for(tmp_path, "python3 train.py")), "--json").stdout)
    assert (report["run"]["steps"], report["run"]["steps_ran"], report["run"]["ignored_max_steps"]) == (20, 546, True)


# The run's parsers on the frameworks' own output, as JAX 0.10 and torch_xla 2.9 print it (trimmed).
JAX_FIRST = """\
TRACING CACHE MISS at /w/code/train.py:41:27 (main):
  never seen function:
    train_step id=140408597141024 defined at /w/code/train.py:14
"""
JAX_MISS = """\
TRACING CACHE MISS at /w/code/train.py:41:27 (main):
  for train_step defined at /w/code/train.py:14
  all previously seen cache keys differ. For the closest previous key:
  different input types:
  * at batch['image'], now f32[{now},28,28,1] and before f32[{before},28,28,1]
  * at batch['label'], now i32[{now}] and before i32[{before}]
"""
JAX_COMPILE = "Compiling jit(train_step) with global shapes and types (ShapedArray(float32[784,10]), " \
    "ShapedArray(float32[{n},28,28,1]), ShapedArray(int32[{n}])). Argument mapping: (UnspecifiedValue,).\n"


def jax_log(sizes: list[int]) -> str:
    text = JAX_FIRST + JAX_COMPILE.format(n=sizes[0])
    for before, now in zip(sizes, sizes[1:], strict=False):
        text += JAX_MISS.format(now=now, before=before) + JAX_COMPILE.format(n=now)
    return text


def test_jax_recompilations_name_the_argument_path() -> None:
    from tpuops.check.compiles import CompileLog, compile_findings

    log = CompileLog("jax", Path("/w/code"))
    assert all(log.feed(line) for line in jax_log([64, 58, 56, 26]).splitlines())  # all the framework's report
    [storm] = compile_findings(log, {"train_step": ("train.py", 14)}, 20)
    assert "`train_step` was compiled 4 times in 20 steps" in storm.message
    assert storm.details[0] == "batch['image']: float32[64,28,28,1] -> float32[58,28,28,1]; " \
                               "batch['label']: int32[64] -> int32[58]"
    assert (storm.file, storm.line) == ("train.py", 14)


# JAX 0.10.2's own lines (JAX_LOG_COMPILES=1 JAX_EXPLAIN_CACHE_MISSES=1) for a trainer that prints, then calls
# its jitted step with a new shape that fails while tracing: the miss explanation is followed by the trainer's
# line and its traceback, with no `Compiling` line after them. A callsite outside the user's frames (a thread
# started by a library) is printed empty ("at :"), and "<unknown>" where JAX cannot name it.
JAX_MISS_THEN_CRASH = """\
TRACING CACHE MISS at /w/code/train.py:17 (<module>):
  never seen function:
    step id=140412053344384 defined at /w/code/train.py:13
Finished tracing step for jit in 0.000588417 sec
Compiling jit(step) with global shapes and types (ShapedArray(float32[6]),). Argument mapping: (UnspecifiedValue,).
Finished jaxpr to MLIR module conversion jit(step) in 0.003660917 sec
Finished XLA compilation of jit(step) in 0.005964518 sec
trainer line after step
TRACING CACHE MISS at {callsite}:
  for step defined at /w/code/train.py:13
  all previously seen cache keys differ. For the closest previous key:
  different input types:
  * at x, now f32[7] and before f32[6]
Finished tracing step for jit in 0.000433445 sec
Traceback (most recent call last):
  File "/w/code/train.py", line 19, in <module>
    step(jnp.ones(7))
  File "/w/code/train.py", line 15, in step
    return x.reshape((3, -1))
           ^^^^^^^^^^^^^^^^^^
TypeError: cannot reshape array of shape (7,) (size 7) into shape (3, -1) because the product of specified axis \
sizes (3) does not evenly divide 7
"""


@pytest.mark.parametrize("callsite", ["/w/code/train.py:19 (<module>)", "", "<unknown>"])
def test_a_jax_cache_miss_explanation_ends_where_its_format_ends(callsite: str) -> None:
    from tpuops.check.compiles import CompileLog

    log = CompileLog("jax", Path("/w/code"))
    text = JAX_MISS_THEN_CRASH.format(callsite=callsite)
    trainer = [line for line in text.splitlines() if not log.feed(line)]
    assert trainer == ["trainer line after step", "Traceback (most recent call last):",
                       '  File "/w/code/train.py", line 19, in <module>', "    step(jnp.ones(7))",
                       '  File "/w/code/train.py", line 15, in step', "    return x.reshape((3, -1))",
                       "           ^^^^^^^^^^^^^^^^^^",
                       "TypeError: cannot reshape array of shape (7,) (size 7) into shape (3, -1) because the "
                       "product of specified axis sizes (3) does not evenly divide 7"]
    assert [c.signature for c in log.compilations] == ["float32[6]"]


def metrics_report(step: int, transfers: int, reads: int, mark_steps: int) -> str:
    return f"""[MetricsData; step={step}]
Metric: TransferFromDeviceTime
  TotalSamples: {transfers}
  Accumulator: 003ms362.546us
Metric: TransferToDeviceTime
  TotalSamples: 17
  Accumulator: 243.785us
Counter: MarkStep
  Value: {mark_steps}
Counter: UncachedCompile
  Value: 1
Counter: aten::_local_scalar_dense
  Value: {reads}

"""


def test_torch_xla_counters_find_a_read_every_step_and_count_the_steps(tmp_path: Path) -> None:
    from tpuops.check.counters import read_torch_counters, transfer_findings

    every_step = tmp_path / "every.txt"
    every_step.write_text("".join(metrics_report(i, i, i, i + 1) for i in range(6)))
    counters = read_torch_counters(every_step)
    assert counters is not None and counters.step_ends == 6 and counters.compiles == 1
    [finding] = transfer_findings(counters)
    assert (finding.rule, finding.file) == ("XLA103", None)
    assert "in 5 of 5 steps" in finding.message
    every_tenth = tmp_path / "tenth.txt"  # a read on logging steps only: the right way, not a finding
    every_tenth.write_text("".join(metrics_report(i, i // 10, i // 10, i + 1) for i in range(30)))
    assert transfer_findings(read_torch_counters(every_tenth)) == []
    assert read_torch_counters(tmp_path / "missing.txt") is None


TF_PREFIX = "I0000 00:00:1795640139.588351   28558 device_compiler.h:{line}] "
TF_SIGNATURE = ("__inference_train_step_{n}[_XlaMustCompile=true,config_proto=13561319589895757934,executor_type="
                "11160318154034397263],float [{batch},8],int32 [{batch}],float [8,4],float [4]")


def tf_log(batches: list[int]) -> str:
    """TensorFlow 2.21's device_compiler lines (TF_CPP_VMODULE=device_compiler=3) for one call per batch."""
    text, shapes = "", []
    for batch in batches:
        known = batch in shapes
        shapes += [] if known else [batch]
        signature = TF_SIGNATURE.format(n=63 + 60 * shapes.index(batch), batch=batch)
        text += TF_PREFIX.format(line=477) + "DeviceCompiler::Compile DeviceCompiler\n"
        text += TF_PREFIX.format(line=482) + f"0: kind=parameter type=float shape=[{batch},8] " \
                                             "is_same_data_across_replicas=0\n"
        if known:
            text += TF_PREFIX.format(line=562) + f"Already Compiled for signature: {signature}\n"
            continue
        text += TF_PREFIX.format(line=551) + f"Instantly compiling for signature: {signature}\n"
        text += TF_PREFIX.format(line=538) + "Compilation of XLA executable time: 156 ms (156337 us) (cumulative: " \
                                             f"{156 * len(shapes)} ms, max: 250 ms, #called: {len(shapes)})\n"
    return text


def test_tensorflow_compilations_are_counted_as_tensorflow_counts_them() -> None:
    from tpuops.check.compiles import CompileLog, compile_findings, trainer_compilations

    log = CompileLog("tensorflow", Path("/w/code"))
    assert all(log.feed(line) for line in tf_log([16, 16, 4, 12, 12, 12, 8, 8]).splitlines())
    assert log.counters == {"xla_compilations": 4}  # TensorFlow's own "#called", beside the signatures we read
    assert trainer_compilations(log, {"train_step": ("train.py", 23)}) == 4
    [storm] = compile_findings(log, {"train_step": ("train.py", 23)}, 8)
    assert storm.details[0] == "arg 0: float32[16,8] -> float32[4,8]; arg 1: int32[16] -> int32[4]"
    assert CompileLog("tensorflow", Path("/w/code")).counters is None  # no report read: no counter, not 0
