"""Training progress at a glance: the progress line (step N of M, steps/s, ETA, last loss) rendered with a fixed
clock, read from trainers' output lines, scalars and command lines; in a pipe `run` and `logs -f` keep their raw
output exactly, on a terminal `logs -f` shows the live line instead."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers import run_cli, run_on_pty
from tpuops.logs.events import ScalarPoint
from tpuops.logs.progress import RunProgress, progress_line, read_line, see_points, total_from_command

QUICKSTART = Path(__file__).parent.parent / "examples" / "quickstart.yaml"


def test_the_line_with_a_fixed_clock() -> None:
    progress = RunProgress()
    assert progress_line("run", progress) == "run waiting for the first step"
    progress.see_line("step 100/1000 loss 2.5000 lr 3.00e-04 tokens/s 16,774 eval_loss 9.9", now=1000.0)
    assert progress_line("run", progress) == "run step 100/1000 (10%)  loss 2.5"  # no rate from one sighting
    progress.see_line("step 200/1000 loss 2.2500 lr 3.00e-04 eval_loss 9.9", now=1010.0)
    # 100 steps in 10 s: 10 steps/s, 800 steps left: 80 s.
    assert progress_line("run", progress) == "run step 200/1000 (20%)  10 steps/s  ETA 1m20s  loss 2.25"
    progress.see_line("step 150/1000 loss 7", now=1011.0)  # a slower source, or a resume short of it: not news
    assert progress.step == 200 and progress.rate() == 10
    progress.see_step(1000, now=1090.0)
    assert progress_line("run", progress) == "run step 1000/1000 (100%)  10 steps/s  loss 2.25"


def test_the_rate_is_over_the_last_half_minute() -> None:
    progress = RunProgress(total=10_000)
    for second in range(0, 120, 10):  # 10 steps/s for a minute, then 1 step/s
        progress.see_step(second * 10 if second <= 60 else 600 + (second - 60), now=float(second))
    assert progress.rate() == pytest.approx(1.0)


@pytest.mark.parametrize(("line", "step", "total", "loss"), [
    ("step 300/1000 loss 1.84", 300, 1000, 1.84),
    ("Epoch 1, step 12 of 50: loss=0.5", 12, 50, 0.5),
    ("step=7 train_loss: 3e-1", 7, None, 0.3),
    ("eval_loss 1.7 at step 9", 9, None, None),  # eval_loss is not the training loss
    ("loading checkpoint step_500.npz", None, None, None),
    ("warmup steps: 100", None, None, None),
])
def test_output_lines_read(line: str, step: int | None, total: int | None, loss: float | None) -> None:
    reading = read_line(line)
    assert (reading.step, reading.total, reading.loss) == (step, total, loss)


def test_scalars_and_command_lines() -> None:
    assert total_from_command("python3 train.py --data x --steps 1000") == 1000
    assert total_from_command("python train.py --max_steps=250 --save-steps 50") == 250
    assert total_from_command("python train.py --num-train-steps 80") == 80
    assert total_from_command("python train.py --save-steps 50 --log-every 10") is None
    runs: dict[str, RunProgress] = {}
    see_points(runs, [ScalarPoint("r1", "loss", 10, 2.0, 0.0), ScalarPoint("r1", "eval_loss", 10, 9.0, 0.0),
                      ScalarPoint("r1", "loss", 20, 1.5, 0.0), ScalarPoint("r2", "lr", 5, 0.1, 0.0)], now=5.0)
    assert (runs["r1"].step, runs["r1"].loss) == (20, 1.5) and (runs["r2"].step, runs["r2"].loss) == (5, None)


def on_a_terminal(*args: str, timeout: float = 120, code: int = 0, stderr: Path | None = None) -> str:
    """`tpuops ARGS` with stdout on a pseudo-terminal (100 columns): what the user would see, colours stripped;
    stderr into the file `stderr` (else nowhere); the exit code must be `code`."""
    exited, output = run_on_pty(args, columns=100, lines=30, stdin_on_pty=False,
                                stderr=stderr if stderr is not None else Path(os.devnull), timeout=timeout)
    assert exited == code
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)


def test_pipes_keep_the_raw_lines_and_a_terminal_gets_the_live_line(tpuops_home: Path) -> None:
    done = run_cli("run", str(QUICKSTART), timeout=300)  # a pipe: today's output, every line
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^\[w0\] step 1000/1000 loss [\d.]+ lr ", done.stdout, re.M)
    assert re.search(r"^\[w1\] worker 1/2, ", done.stdout, re.M)
    assert re.search(r"^\[scalars\] \S+ step \d+: loss=", done.stdout, re.M)
    assert "steps/s" not in done.stdout and "waiting for the first step" not in done.stdout
    run_id = re.search(r"^Run (\S+) on quickstart", done.stdout, re.M).group(1)

    piped = run_cli("logs", "quickstart", "-f", "--until-idle", "1", "--interval", "0.2")
    assert piped.returncode == 0, piped.stderr
    assert re.search(rf"^{run_id} loss 1000 [\d.]+$", piped.stdout, re.M)
    assert "steps/s" not in piped.stdout

    shown = on_a_terminal("logs", "quickstart", "-f", "--until-idle", "1", "--interval", "0.2")
    # The run's step count comes from its command line (--steps 1000); the loss from its `loss` tag.
    assert re.search(rf"{run_id} step 1000/1000 \(100%\)\s+loss [\d.]+", shown), shown
    assert f"{run_id} loss 1000" not in shown  # not the raw points
    verbose = on_a_terminal("logs", "quickstart", "-f", "--until-idle", "1", "--interval", "0.2", "--verbose")
    assert f"{run_id} loss 1000" in verbose
    json.loads(run_cli("status", "--json").stdout)  # the cluster is still there to be deleted
    assert run_cli("down", "quickstart", "--yes", "--delete-bucket", "--force").returncode == 0


def test_a_failed_run_on_a_terminal_still_says_its_last_lines(tpuops_home: Path, tmp_path: Path) -> None:
    from tests.helpers import write_spec

    (tmp_path / "src").mkdir()
    spec = write_spec(tmp_path, """
        name: failing
        provider: local
        tpu: {type: v2-8, workers: 1}
        code: {path: ./src}
        trainer:
          framework: jax
          command: "echo step 1/10 loss 3.5; echo 'Traceback: boom' >&2; exit 3"
    """)
    errors = tmp_path / "stderr"
    try:
        shown = on_a_terminal("run", str(spec), code=3, stderr=errors)
        assert "run step 1/10 (10%)  loss 3.5" in shown and "[w0]" not in shown  # the live line, not the raw one
        assert "last lines of w0:\n  step 1/10 loss 3.5\n  Traceback: boom" in errors.read_text()
        verbose = on_a_terminal("run", str(spec), "--verbose", code=3)
        assert "[w0] step 1/10 loss 3.5" in verbose and "run step 1/10" not in verbose
    finally:
        assert run_cli("down", "failing", "--yes").returncode == 0
