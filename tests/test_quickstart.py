"""The embedded default end to end: `tpuops run examples/quickstart.yaml` on the local provider."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec

QUICKSTART = Path(__file__).parent.parent / "examples" / "quickstart.yaml"


def processes_under(directory: Path) -> list[int]:
    """Processes whose HOME lies under `directory` (what the local runner gives every worker process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if f"HOME={directory}".encode() in environ:
                found.append(int(entry.name))
    return found


def test_quickstart_trains_and_down_leaves_nothing(tpuops_home: Path) -> None:
    done = run_cli("run", str(QUICKSTART), "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["exit_code"] == 0 and [w["exit_code"] for w in summary["workers"]] == [0, 0]
    assert {s["tag"] for s in summary["scalars"]} >= {"loss", "learning_rate"}

    points = [json.loads(line) for line in run_cli("logs", "quickstart", "--json", "--since", "0",
                                                    "--tag", "^loss$").stdout.splitlines()]
    losses = [p["value"] for p in sorted(points, key=lambda p: p["step"])]
    assert len(losses) > 100
    assert sum(losses[-20:]) / 20 < 0.7 * sum(losses[:20]) / 20  # it learned something

    status = run_cli("status", "quickstart")
    assert status.returncode == 0 and "2 worker(s)" in status.stdout
    assert f"run {summary['run_id']}" in status.stdout
    assert "w0: exited 0 (now)" in status.stdout and "w1: exited 0 (now)" in status.stdout

    workers = tpuops_home / "local" / "workers"
    gone = run_cli("down", "quickstart", "--yes", "--delete-bucket", "--force")
    assert gone.returncode == 0, gone.stderr
    assert not any(workers.iterdir())
    assert not any((tpuops_home / "local" / "buckets").iterdir())
    assert processes_under(workers) == []
    assert not (tpuops_home / "clusters" / "quickstart" / "state.json").exists()
    again = run_cli("down", str(QUICKSTART), "--yes")  # the spec names the provider: its records are searched
    assert again.returncode == 0 and "nothing was left to delete (searched zone(s) local)" in again.stdout
    by_name = run_cli("down", "quickstart", "--yes")  # no state, no spec: Google Cloud, and no project known
    assert by_name.returncode == 1 and "no GCP project known" in by_name.stderr


def test_a_failing_worker_fails_the_run_and_is_named(tmp_path: Path, tpuops_home: Path) -> None:
    spec = write_spec(tmp_path, """
        name: failing
        provider: local
        tpu: {type: v2-8, workers: 3}
        trainer:
          framework: jax
          command: 'echo "worker $TPUOPS_WORKER_ID"; [ "$TPUOPS_WORKER_ID" != 2 ] || exit 4'
        """)
    done = run_cli("run", str(spec), "--down", timeout=120)
    assert done.returncode == 4, done.stderr
    assert "1 of 3 workers failed: w2" in done.stderr
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("[w")) == [
        "[w0] worker 0", "[w1] worker 1", "[w2] worker 2"]
    assert not any((tpuops_home / "local" / "workers").iterdir())  # --down after a failure too


@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_ctrl_c_sigterm_or_sighup_during_run_down_cleans_up(tmp_path: Path, tpuops_home: Path, signum: int,
                                                            exit_code: int) -> None:
    """`timeout 20 tpuops run spec --down`, a `kill`, a closed terminal: each tears down as Ctrl-C does."""
    spec = write_spec(tmp_path, """
        name: interrupted
        provider: local
        tpu: {type: v2-8, workers: 2}
        trainer: {framework: jax, command: 'echo started; sleep 300'}
        """)
    process = subprocess.Popen([sys.executable, "-m", "tpuops", "run", str(spec), "--down"], env=os.environ.copy(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stdout.readline()  # type: ignore[union-attr]
            seen.append(line)
            if "started" in line and line.startswith("[w"):
                break
        else:
            raise AssertionError("the run did not start: " + "".join(seen))
        process.send_signal(signum)
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == exit_code, out
    assert "==> down" in out and "deleted the cluster interrupted" in out, out
    assert "Traceback" not in out
    workers = tpuops_home / "local" / "workers"
    assert not any(workers.iterdir())
    assert processes_under(workers) == []
    assert not (tpuops_home / "clusters" / "interrupted" / "state.json").exists()


def long_quickstart(directory: Path, command: str | None = None, steps: int = 30000) -> Path:
    """The quickstart spec with a long step count (or another command), its paths made absolute."""
    root = QUICKSTART.parent
    text = QUICKSTART.read_text().replace("../templates/charlm", str(root.parent / "templates" / "charlm"))
    text = text.replace("{from: data,", f"{{from: {root / 'data'},").replace("--steps 1000", f"--steps {steps}")
    if command is not None:
        text = text.replace("  command: python3 train.py", f"  command: {command} #")
    spec = directory / f"quickstart-{steps}-{'cmd' if command else 'train'}.yaml"
    spec.write_text(text)
    return spec


def start_and_interrupt(*args: str) -> tuple[int, str, str]:
    """`tpuops ARGS`, SIGINT once the trainer has reported its first step; (exit code, stdout, stderr)."""
    process = subprocess.Popen([sys.executable, "-m", "tpuops", *args], env=os.environ.copy(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()  # type: ignore[union-attr]
            assert line, "the run ended before training started: " + "".join(seen)
            seen.append(line)
            if line.startswith("[w") and " step " in line:
                break
        else:
            raise AssertionError("training did not start: " + "".join(seen))
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return process.returncode, "".join(seen) + out, err


def assert_no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr and "Aborted" not in stderr, stderr


def test_ctrl_c_during_run_stops_following_and_the_run_goes_on(tmp_path: Path, tpuops_home: Path) -> None:
    code, out, err = start_and_interrupt("run", str(long_quickstart(tmp_path)))
    try:
        assert code == 130, err
        assert_no_traceback(err)
        assert "stopped following" in err and "`tpuops stop quickstart`" in err
        assert "[charlm" not in out  # one prefix per line: tpuops's own [wN]
        status = run_cli("status", "quickstart")
        assert "w0: running (now)" in status.stdout and "w1: running (now)" in status.stdout, status.stdout
    finally:
        stopped = run_cli("stop", "quickstart")
        gone = run_cli("down", "quickstart", "--yes", "--delete-bucket", "--force")
    assert stopped.returncode == 0, stopped.stderr
    assert gone.returncode == 0, gone.stderr
    assert processes_under(tpuops_home / "local" / "workers") == []


def test_ctrl_c_during_run_down_stops_the_run_and_status_says_so(tmp_path: Path, tpuops_home: Path) -> None:
    code, _, err = start_and_interrupt("run", str(long_quickstart(tmp_path)), "--down")
    assert code == 130, err
    assert_no_traceback(err)
    assert "stopped run" in err and "deleted the cluster quickstart (the bucket stays)" in err
    assert processes_under(tpuops_home / "local" / "workers") == []
    status = run_cli("status", "quickstart")  # the state stays with the bucket: it must tell the truth
    assert status.returncode == 0, status.stderr
    assert "running" not in status.stdout, status.stdout
    assert "w0: killed" in status.stdout and "w1: killed" in status.stdout, status.stdout
    assert run_cli("down", "quickstart", "--yes", "--delete-bucket", "--force").returncode == 0


def test_a_run_shows_only_its_own_scalars(tmp_path: Path, tpuops_home: Path) -> None:
    first = run_cli("run", str(long_quickstart(tmp_path, steps=60)), timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "[scalars]" in first.stdout and "last scalars" in first.stdout
    # Same cluster, same logdir, a trainer that fails at once: the first run's scalars are not this run's.
    failing = run_cli("run", str(long_quickstart(tmp_path, command="exit 3")), "--down", timeout=300)
    assert failing.returncode == 3, failing.stderr[-3000:]
    assert "[scalars]" not in failing.stdout and "last scalars" not in failing.stdout, failing.stdout
    assert run_cli("down", "quickstart", "--yes", "--delete-bucket", "--force").returncode == 0
