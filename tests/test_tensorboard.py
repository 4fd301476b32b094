"""`tpuops tensorboard` on the local simulator's quickstart: TensorBoard serves the run's tags from the mirror, a
run launched while it runs shows up (the mirror loop), and Ctrl-C stops it leaving no process behind."""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import assert_clean_exit, interrupt, run_cli
from tests.sshd import free_port
from tpuops.context import Context
from tpuops.ops.down import execute, find
from tpuops.ops.run_control import record_run
from tpuops.ops.tensorboard import tensorboard as serve
from tpuops.ops.up import up
from tpuops.state import RunRecord, StateStore

QUICKSTART = Path(__file__).parent.parent / "examples" / "quickstart.yaml"
pytestmark = pytest.mark.skipif(subprocess.run([sys.executable, "-c", "import tensorboard.main"],
                                               capture_output=True, timeout=120).returncode != 0,
                                reason="tensorboard is not importable")


def first_line(process: subprocess.Popen[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            return process.stdout.readline()
        assert process.poll() is None, process.stderr.read() if process.stderr else "exited"
    raise AssertionError("no line in time")


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for(condition, timeout: float):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError("condition not met in time")


def tensorboard_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"tensorboard.main" in cmdline and marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


def test_tensorboard_serves_the_runs_and_stops_cleanly(tpuops_home: Path) -> None:
    done = run_cli("run", str(QUICKSTART), "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first_run = json.loads(done.stdout)["run_id"]
    port = free_port()
    board = subprocess.Popen([sys.executable, "-m", "tpuops", "tensorboard", "quickstart", "--port", str(port),
                              "--interval", "0.5", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    marker = str(tpuops_home)
    try:
        info = json.loads(first_line(board, timeout=180))
        assert info["url"] == f"http://127.0.0.1:{port}/" and info["runs"] == "all"
        tags = get_json(f"{info['url']}data/plugin/scalars/tags")
        assert {"loss", "learning_rate"} <= set(tags[first_run])

        # A run launched while TensorBoard runs appears in it: the mirror loop keeps its directory current.
        again = run_cli("launch", "quickstart", "--follow", "--", "python3 train.py --data ~/data/quickstart.txt "
                        "--steps 20", timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        runs = wait_for(lambda: [r for r in get_json(f"{info['url']}data/runs") if r != first_run], timeout=120)
        assert len(runs) == 1 and runs[0] > first_run  # run ids start with their launch time

        assert tensorboard_processes(marker)  # the test's own marker finds it while it runs
    finally:
        _, stderr = interrupt(board, signum=signal.SIGINT)
    assert board.returncode == 0, stderr
    assert_clean_exit(stderr)
    assert "TensorBoard stopped" in stderr
    assert tensorboard_processes(marker) == []
    assert run_cli("down", "quickstart", "--yes", "--delete-bucket", "--force").returncode == 0


def sim_spec(directory: Path) -> Path:
    """A local cluster with a logdir and no run yet: enough for TensorBoard to start on."""
    from tests.helpers import write_spec

    spec = write_spec(directory, """
        name: sim
        provider: local
        tpu: {type: v2-8, workers: 1}
        bucket: {name: sim-bucket}
        code: {path: ./src}
        logs: {tensorboard: gs://sim-bucket/logs}
    """)
    (directory / "src").mkdir()
    return spec


def test_port_zero_serves_on_a_free_port_and_says_which(tpuops_home: Path, tmp_path: Path) -> None:
    """As `dashboard --port 0`: TensorBoard takes any free port and the URL printed names it."""
    assert run_cli("up", str(sim_spec(tmp_path))).returncode == 0
    board = subprocess.Popen([sys.executable, "-m", "tpuops", "tensorboard", "sim", "--port", "0", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marker = str(tpuops_home)
    try:
        info = json.loads(first_line(board, timeout=180))
        port = int(info["url"].removeprefix("http://127.0.0.1:").rstrip("/"))
        assert port > 0 and get_json(f"{info['url']}data/runs") == []
    finally:
        _, stderr = interrupt(board, signum=signal.SIGINT)
        assert run_cli("down", "sim", "--yes", "--delete-bucket", "--force").returncode == 0
    assert board.returncode == 0, stderr
    assert_clean_exit(stderr)
    assert tensorboard_processes(marker) == []


def test_a_taken_port_is_one_line(tpuops_home: Path, tmp_path: Path) -> None:
    import socket

    assert run_cli("up", str(sim_spec(tmp_path))).returncode == 0
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            result = run_cli("tensorboard", "sim", "--port", str(taken.getsockname()[1]))
        assert result.returncode == 2 and "is in use" in result.stderr and "--port N" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        assert run_cli("down", "sim", "--yes", "--delete-bucket", "--force").returncode == 0


class _Ready(Exception):
    """Raised from on_ready: TensorBoard is up and everything it needed has been read."""


def test_tensorboard_reads_the_cluster_state_once(tpuops_home: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The logdir, the runs and the provider come from one read of the state (a workflow hands on what it holds);
    counted at StateStore.load, through which every read goes. Later reads (the mirror loop learning of new
    launches) are after on_ready, and the loop's interval here is longer than the test."""
    ctx = Context.from_env()
    up(ctx, sim_spec(tmp_path))
    record_run(ctx, "sim", RunRecord(id="20261127-100000-aaaa", command="train", workers=["w0"]))
    reads: collections.Counter[str] = collections.Counter()
    load = StateStore.load

    def counted_load(store: StateStore, name: str):  # type: ignore[no-untyped-def]
        reads["state"] += 1
        return load(store, name)

    def ready(info: object) -> None:
        raise _Ready(info)

    try:
        monkeypatch.setattr(StateStore, "load", counted_load)
        with pytest.raises(_Ready) as shown:
            serve(ctx, "sim", port=0, interval=3600, warn=lambda _: None, on_ready=ready)
        assert reads["state"] == 1
        assert shown.value.args[0].runs == "all" and shown.value.args[0].cluster == "sim"
        assert tensorboard_processes(str(tpuops_home)) == []  # stopped on the way out
    finally:
        monkeypatch.setattr(StateStore, "load", load)
        plan, cloud = find(ctx, "sim", delete_bucket=True, force=True)
        execute(ctx, plan, cloud)
