"""An interrupted push leaves nothing behind: not in the cluster's state folder (where earlier versions kept a
payload tar of hundreds of MB for good), not on the workers; what a killed push did leave is swept by the next
push, and `down` removes the push cache. The local provider, through the real CLI, with real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import assert_clean_exit, run_cli, write_spec

SPEC = """
name: leaky
provider: local
tpu: {type: v2-8, workers: 2}
code: {path: code}
trainer: {framework: jax, command: "true"}
"""


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture
def cluster(tmp_path: Path, tpuops_home: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "weights.bin").write_bytes(os.urandom(6 * 1024 * 1024))  # more than pipes hold: the send is mid-way
    assert run_cli("up", str(write_spec(tmp_path, SPEC))).returncode == 0
    return code


def held_tar(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A `tar` first on the workers' PATH that waits for a file before it unpacks: the push stops mid-way,
    with the payload partly sent, until the test lets it go on."""
    folder, go = tmp_path / "held-bin", tmp_path / "go"
    folder.mkdir()
    real = subprocess.run(["sh", "-c", "command -v tar"], capture_output=True, text=True).stdout.strip()
    (folder / "tar").write_text(f'#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.05; done\nexec {real} "$@"\n')
    (folder / "tar").chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}, go


def worker_trees(tpuops_home: Path) -> list[Path]:
    return sorted(tpuops_home.rglob(".tpuops-trees/code"))


def in_flight(tpuops_home: Path) -> list[Path]:
    """What a push in progress keeps on the workers: its partial tree and, when it serves, the payload."""
    return [p for trees in worker_trees(tpuops_home) for p in trees.iterdir()
            if p.name.startswith((".partial-", ".payload-"))]


def receiving(tpuops_home: Path) -> int:
    """How many workers have a push in flight."""
    return len({p.parent for p in in_flight(tpuops_home)})


def temporary_files(tpuops_home: Path) -> list[Path]:
    """Anything in the state folder that a finished push would not keep."""
    return [p for p in tpuops_home.rglob("*")
            if p.name.startswith("payload-") or p.suffix in (".tar", ".tmp") or ".tpuops-new-" in p.name]


def push_in_background(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tpuops", "push", "leaky"], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_push_interrupted_by_a_signal_leaves_nothing(cluster: Path, tmp_path: Path, tpuops_home: Path,
                                                       signum: int) -> None:
    env, go = held_tar(tmp_path)
    process = push_in_background(env)
    try:
        wait_for(lambda: receiving(tpuops_home) == 2)  # both workers are receiving
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        go.touch()  # a worker still waiting sees the end of its input (the client is gone) and cleans up
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode != 0
    assert_clean_exit(err)
    assert temporary_files(tpuops_home) == []
    wait_for(lambda: in_flight(tpuops_home) == [])
    assert all(not (trees.parent.parent / "code").exists() for trees in worker_trees(tpuops_home))  # no half tree

    done = run_cli("push", "leaky")
    assert done.returncode == 0, done.stderr
    assert temporary_files(tpuops_home) == []


def test_what_a_killed_push_left_is_swept_by_the_next_push_and_down_removes_the_cache(
        cluster: Path, tmp_path: Path, tpuops_home: Path) -> None:
    cache = tpuops_home / "clusters" / "leaky" / "push"
    env, go = held_tar(tmp_path)
    process = push_in_background(env)
    try:
        wait_for(lambda: receiving(tpuops_home) == 2)
        # SIGKILL runs no clean-up: the agent on w0 dies with its partial tree on the disk
        [partial] = [p for p in in_flight(tpuops_home) if "/w0/" in str(p) and p.name.startswith(".partial-")]
        os.kill(int(partial.name.rsplit("-", 1)[1]), signal.SIGKILL)
        process.kill()
        process.wait(timeout=10)
    finally:
        go.touch()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert partial.exists()
    # and what earlier versions left in the state folder: a payload tar, a temporary file of a write that died,
    # beside the code's cache and in the cache of a destination no longer pushed
    an_hour_ago = time.time() - 3600
    for folder in [*cache.iterdir(), cache / "0123456789ab"]:
        folder.mkdir(exist_ok=True)
        (folder / "payload-x1y2.tar").write_bytes(b"\0" * 10240)
        (folder / ".hashes-0123.json.abcd.tmp").write_text("{")
        os.utime(folder / ".hashes-0123.json.abcd.tmp", (an_hour_ago, an_hour_ago))

    done = run_cli("push", "leaky")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: in_flight(tpuops_home) == [])  # the old tree and the killed push's leftovers, in the background
    assert temporary_files(tpuops_home) == []

    assert run_cli("down", "leaky", "--yes").returncode == 0
    assert not cache.exists()
