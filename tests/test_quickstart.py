"""The embedded default end to end: `tpuops run examples/quickstart.yaml` on the local provider."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
    again = run_cli("down", "quickstart", "--yes")
    assert again.returncode == 0 and "nothing" in again.stdout + again.stderr


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


def test_ctrl_c_during_run_down_cleans_up(tmp_path: Path, tpuops_home: Path) -> None:
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
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode != 0
    workers = tpuops_home / "local" / "workers"
    assert not any(workers.iterdir())
    assert processes_under(workers) == []
    assert not (tpuops_home / "clusters" / "interrupted" / "state.json").exists()
