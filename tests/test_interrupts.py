"""Ctrl-C (SIGINT to the CLI subprocess), closed pipes and exit codes, on real sshd workers on loopback.

Every wait is bounded; the bounds are generous wait limits, not speed claims.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.helpers import assert_clean_exit, interrupt, run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.access.cluster import REFUSED_TIMEOUT, cluster_access, make_runners
from tpuops.context import Context
from tpuops.ops.launch import run_states, stop

pytestmark = [
    pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd"),
    pytest.mark.usefixtures("tpu_paths_in_worker_homes"),
]

SPEC = """
name: {name}
zone: europe-west4-a
tpu: {{type: v3-32}}
trainer:
  framework: jax
  command: echo default
"""
WAIT = 60.0  # bound on every wait below


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd-interrupts"), 2) as cluster:
        yield cluster


def make_cluster(sshd: SshdCluster, home: Path, tmp_path: Path, name: str, up_since: timedelta | None = None) -> str:
    cluster_dir = sshd.write_cluster(home, name, write_spec(tmp_path, SPEC.format(name=name)), pin=True)
    if up_since is not None:  # as `up` records a TPU it saw READY
        state = json.loads((cluster_dir / "state.json").read_text())
        ready = (datetime.now(timezone.utc) - up_since).isoformat(timespec="seconds")
        state["resources"] = [{"kind": "tpu", "name": name, "zone": "europe-west4-a", "status": "created",
                               "updated_at": ready}]
        (cluster_dir / "state.json").write_text(json.dumps(state))
    return name


def cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tpuops", *args], env=os.environ.copy(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def command_lines() -> dict[int, str]:
    """Every process's command line (the loopback workers share this machine's pids)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
    return found


def pids_running(command: str) -> list[int]:
    """Processes whose command line is `command` (not the shells around it, nor our CLI)."""
    return [pid for pid, line in command_lines().items() if line.strip() == command]


def remote_tails(cluster: str) -> list[int]:
    """The `tail`s that follow.sh runs on the workers to stream a run's output."""
    return [pid for pid, line in command_lines().items()
            if line.startswith("tail ") and f"tpuops/{cluster}/runs/" in line]


def wait_until(condition: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_ctrl_c_sigterm_or_sighup_during_exec_signals_the_remote_command(
        sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path, signum: int, exit_code: int) -> None:
    name = make_cluster(sshd2, tpuops_home, tmp_path, "execint")
    seconds = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 1000:03d}"  # a unique `sleep` to look for
    process = cli("exec", name, "--", f"echo started; sleep {seconds}")
    try:
        wait_until(lambda: len(pids_running(f"sleep {seconds}")) == 2, "the remote sleeps to start")
    except AssertionError:
        process.kill()
        raise
    _, stderr = interrupt(process, signum=signum)
    assert process.returncode == exit_code, stderr
    assert_clean_exit(stderr)
    assert "interrupted" in stderr and "signalled to stop" in stderr
    wait_until(lambda: not pids_running(f"sleep {seconds}"), "the remote sleeps to end (as with ssh -t)")


def test_closed_stdout_ends_exec_and_the_remote_command(
    sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path
) -> None:
    """`tpuops exec NAME -- yes MARKER | head -1`: the pipe closes, everything ends, quietly."""
    name = make_cluster(sshd2, tpuops_home, tmp_path, "pipe")
    marker = f"marker-{uuid.uuid4().hex[:12]}"
    process = cli("exec", name, "--", f"yes {marker}")
    try:
        first = process.stdout.readline()  # type: ignore[union-attr]
        assert first.strip() in (f"[w0] {marker}", f"[w1] {marker}")
        process.stdout.close()  # type: ignore[union-attr]  what `head -1` does after its line
        _, stderr = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 141, stderr  # 128 + SIGPIPE, as `yes` itself reports in a pipeline
    assert stderr == ""  # quietly: no traceback, no table, no "Broken pipe"
    wait_until(lambda: not pids_running(f"yes {marker}"), "the remote `yes` to end")


def test_exec_exits_with_the_commands_own_code(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd2, tpuops_home, tmp_path, "codes")
    one = run_cli("exec", name, "--worker", "1", "--", "exit 5")
    assert one.returncode == 5, one.stderr
    alike = run_cli("exec", name, "--", "exit 3")
    assert alike.returncode == 3, alike.stderr
    assert "2 of 2 workers failed" in alike.stderr
    # Worker 0 listens on 127.X.Y.10, worker 1 on .11 (tests/sshd.py): they fail with different codes.
    differ = run_cli("exec", name, "--", 'case "$SSH_CONNECTION" in *.10\\ *) exit 3;; *) exit 4;; esac')
    assert differ.returncode == 1, differ.stderr  # failing differently: no single code to give back
    assert run_cli("exec", name, "--", "true").returncode == 0


def test_refused_connection_fails_fast_on_a_cluster_up_for_a_while(
    sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path
) -> None:
    settled = make_cluster(sshd2, tpuops_home, tmp_path, "settled", up_since=timedelta(hours=1))
    fresh = make_cluster(sshd2, tpuops_home, tmp_path, "fresh", up_since=timedelta(seconds=10))
    ctx = Context.from_env()
    # A cluster just up waits the whole connect timeout for a refusing worker (its sshd may still start).
    [runner] = make_runners(cluster_access(ctx, fresh), cluster_access(ctx, fresh).workers[:1])
    assert runner.settings.refused_timeout is None  # type: ignore[attr-defined]
    [runner] = make_runners(cluster_access(ctx, settled), cluster_access(ctx, settled).workers[:1])
    assert runner.settings.refused_timeout == REFUSED_TIMEOUT  # type: ignore[attr-defined]

    sshd2.stop(1)
    try:
        # Bound below the 60 s connect timeout: this fails if the refusal were retried for the whole minute.
        done = run_cli("exec", settled, "--", "echo hi", timeout=45)
    finally:
        sshd2.start(1)
    assert done.returncode == 255, done.stderr  # the only failure is a connection failure: ssh's 255
    assert "[w0] hi" in done.stdout
    assert "w1: " in done.stderr and "refused the connection" in done.stderr


@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_during_launch_follow_and_logs_follow(sshd2: SshdCluster, tpuops_home: Path,
                                                                tmp_path: Path, signum: int, exit_code: int) -> None:
    name = make_cluster(sshd2, tpuops_home, tmp_path, "follows")
    seconds = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 1000:03d}"
    process = cli("launch", name, "--follow", "--", f"echo trainer up; sleep {seconds}")
    try:
        seen = []
        while len(seen) < 2:
            line = process.stdout.readline()  # type: ignore[union-attr]
            assert line, "launch --follow ended before the trainer spoke"
            if "trainer up" in line:
                seen.append(line)
        _, stderr = interrupt(process, signum=signum)
        assert process.returncode == exit_code, stderr
        assert_clean_exit(stderr)
        assert "stopped following" in stderr and f"`tpuops stop {name}`" in stderr
        # The trainer goes on (detached); only the followers (remote `tail`s) were stopped.
        ctx = Context.from_env()
        assert set(run_states(ctx, name).values()) == {"running"}
        wait_until(lambda: not remote_tails(name), "the remote tails to end")

        follower = cli("logs", name, "--workers", "-f")
        line = follower.stdout.readline()  # type: ignore[union-attr]
        assert "trainer up" in line
        wait_until(lambda: len(remote_tails(name)) == 2, "logs -f to follow both workers")
        _, stderr = interrupt(follower, signum=signum)
        assert follower.returncode == exit_code, stderr
        assert_clean_exit(stderr)
        assert f"`tpuops stop {name}`" in stderr
        assert set(run_states(ctx, name).values()) == {"running"}
        wait_until(lambda: not remote_tails(name), "the remote tails of logs -f to end")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        stop(Context.from_env(), name)
    assert not pids_running(f"sleep {seconds}")
