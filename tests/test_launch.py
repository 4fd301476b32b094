"""launch / follow / stop on real sshd workers: environment, detachment, stale TPU holders, setup once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.context import Context
from tpuops.ops.launch import LaunchOptions, RunInProgress, follow, launch_run, run_states, stop, worst_exit_code
from tpuops.ops.remote import exec_command

pytestmark = [
    pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd"),
    pytest.mark.usefixtures("tpu_paths_in_worker_homes"),
]

SPEC = """
name: {name}
zone: {zone}
tpu:
  type: {type}
  mode: {mode}
bucket: {{name: {name}-bucket}}
trainer:
  framework: {framework}
  command: echo default
  env: {{MY_SETTING: "a b'c"}}
logs: {{tensorboard: "gs://{name}-bucket/logs"}}
"""


@pytest.fixture(scope="module")
def sshd3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd3"), 3) as cluster:
        yield cluster




def make_cluster(sshd: SshdCluster, home: Path, tmp_path: Path, *, name: str = "demo", framework: str = "jax",
                 mode: str = "vm", setup: str | None = None, node_ip: str | None = None) -> str:
    zone, accelerator = ("us-central1-f", "v2-8") if mode == "node" else ("europe-west4-a", "v3-32")
    text = SPEC.format(name=name, zone=zone, type=accelerator, mode=mode, framework=framework)
    if setup:
        text = text.replace("  command:", f"  setup: {setup}\n  command:")
    if mode == "node":
        text += "client_vm: {machine_type: n1-standard-2}\n"
    cluster_dir = sshd.write_cluster(home, name, write_spec(tmp_path, text))
    if mode == "node":  # a legacy Node: the client VM is the only SSH target, the Node has an IP
        state = json.loads((cluster_dir / "state.json").read_text())
        state["workers"] = [dict(state["workers"][0], role="client_vm")]
        state["resources"] = [{"kind": "tpu", "name": name, "zone": zone, "status": "created",
                               "detail": {"tpu_endpoints": f"{node_ip or '10.1.2.3'}:8470"}}]
        (cluster_dir / "state.json").write_text(json.dumps(state))
    return name


def launch_and_follow(name: str, command: str, **options: object) -> dict[str, tuple[int | None, list[str]]]:
    ctx = Context.from_env()
    report = launch_run(ctx, name, LaunchOptions(command=command, **options))  # type: ignore[arg-type]
    assert report.ok, report.as_dict()
    lines: dict[str, list[str]] = {}
    step = follow(ctx, name, on_line=lambda worker, _stream, line: lines.setdefault(worker, []).append(line))
    return {r.worker: (r.exit_code, lines.get(r.worker, [])) for r in step.results}


def env_of(lines: list[str]) -> dict[str, str]:
    return dict(line.split("=", 1) for line in lines if "=" in line)


ENV_DUMP = "env | grep -E '^(TPUOPS_|PJRT_|XRT_|TPU_|MY_SETTING|JAX_)' | sort"


def test_environment_on_every_worker_of_a_tpu_vm(sshd3: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd3, tpuops_home, tmp_path, framework="pytorch")
    results = launch_and_follow(name, ENV_DUMP)
    assert sorted(results) == ["w0", "w1", "w2"]
    run_id = Context.from_env().store.require(name).current_run.id
    for index, (code, lines) in enumerate(results[w] for w in ("w0", "w1", "w2")):
        assert code == 0
        env = env_of(lines)
        assert env["TPUOPS_CLUSTER"] == name and env["TPUOPS_RUN_ID"] == run_id
        assert env["TPUOPS_WORKER_ID"] == str(index) and env["TPUOPS_NUM_WORKERS"] == "3"
        assert env["TPUOPS_COORDINATOR"] == f"{sshd3.workers[0].host}:8476"
        assert env["TPUOPS_LOGDIR"] == f"gs://{name}-bucket/logs"
        assert env["PJRT_DEVICE"] == "TPU" and env["MY_SETTING"] == "a b'c"
        assert "TPUOPS_RESUME" not in env and "XRT_TPU_CONFIG" not in env


@pytest.mark.parametrize(("framework", "mode", "expected"), [
    ("tensorflow", "vm", {"TPU_NAME": "local"}),
    ("tensorflow", "node", {"TPU_NAME": "envnode"}),
    ("pytorch", "node", {"XRT_TPU_CONFIG": "tpu_worker;0;10.9.8.7:8470", "TPU_IP_ADDRESS": "10.9.8.7"}),
    ("jax", "vm", {}),
])
def test_framework_environment(sshd3: SshdCluster, tpuops_home: Path, tmp_path: Path, framework: str, mode: str,
                               expected: dict[str, str]) -> None:
    name = make_cluster(sshd3, tpuops_home, tmp_path, name="envnode", framework=framework, mode=mode,
                        node_ip="10.9.8.7")
    results = launch_and_follow(name, ENV_DUMP)
    assert sorted(results) == (["client"] if mode == "node" else ["w0", "w1", "w2"])
    env = env_of(next(iter(results.values()))[1])
    framework_keys = {k: v for k, v in env.items() if k.startswith(("PJRT_", "XRT_", "TPU_"))}
    assert framework_keys == expected


def test_run_outlives_the_launcher_and_stop_leaves_nothing(sshd3: SshdCluster, tpuops_home: Path,
                                                           tmp_path: Path) -> None:
    name = make_cluster(sshd3, tpuops_home, tmp_path)
    marker = f"tpuops-test-{uuid.uuid4().hex[:8]}"
    # The launcher is a separate process that exits (its SSH connections close) right after starting.
    done = run_cli("launch", name, "--", f"sh -c 'sleep 300; echo {marker}' & sleep 300 # {marker}", timeout=60)
    assert done.returncode == 0, done.stderr
    assert "started on 3 workers" in done.stdout
    time.sleep(0.5)
    assert run_states(Context.from_env(), name) == {"w0": "running", "w1": "running", "w2": "running"}
    assert _processes_with(marker)

    with pytest.raises(RunInProgress, match="still running on w0, w1, w2"):
        launch_run(Context.from_env(), name, LaunchOptions(command="true"))

    report = stop(Context.from_env(), name)
    assert report.ok and report.worker_states == {"w0": "killed", "w1": "killed", "w2": "killed"}
    assert _processes_with(marker) == []
    state = Context.from_env().store.require(name)
    assert state.current_run.worker_states == {"w0": "killed", "w1": "killed", "w2": "killed"}


def test_replace_stops_the_old_run(sshd3: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd3, tpuops_home, tmp_path)
    marker = f"tpuops-old-{uuid.uuid4().hex[:8]}"
    assert launch_run(Context.from_env(), name, LaunchOptions(command=f"sleep 300 # {marker}")).ok
    report = launch_run(Context.from_env(), name, LaunchOptions(command="echo new", replace=True))
    assert report.ok and [s.name for s in report.steps][:2] == ["push", "stop"]
    assert _processes_with(marker) == []


def test_stale_tpu_holder_and_lock_file_are_cleared(sshd3: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd3, tpuops_home, tmp_path)
    worker = sshd3.workers[1]
    (worker.home / "dev").mkdir(exist_ok=True)
    (worker.home / "dev" / "accel0").write_text("")
    (worker.home / "libtpu_lockfile").write_text("")
    marker = f"tpuops-stale-{uuid.uuid4().hex[:8]}"
    # HUP ignored: the exec's session ends as soon as the holder is spawned, and hangup.sh's HUP to that session's
    # group must not reach the holder before `setsid` has moved it out (a race under load).
    planted = exec_command(Context.from_env(), name, f"trap '' HUP; setsid sh -c 'exec 3<~/dev/accel0; sleep 300 "
                           f"# {marker}' > /dev/null 2>&1 < /dev/null &", workers="1")
    # Found, and moved out by setsid: the exec's session group gets KILL 3 s after it ended, and under load the
    # holder could be found while still in that group, then die before the launch looks for it.
    assert planted.ok and _wait_for(lambda: _session_leaders_with(marker))

    free_lines: list[str] = []
    report = launch_run(Context.from_env(), name, LaunchOptions(command="true"),
                        on_line=lambda w, _s, line: free_lines.append(f"{w} {line}"))
    assert report.ok
    assert _processes_with(marker) == []
    assert not (worker.home / "libtpu_lockfile").exists()
    assert any("stopping process group" in line and "accel0" in line for line in free_lines), free_lines
    assert "w1 removed /root/libtpu_lockfile" in free_lines or any("removed" in x for x in free_lines)


def test_failing_worker_is_reported_with_its_exit_code(sshd3: SshdCluster, tpuops_home: Path,
                                                       tmp_path: Path) -> None:
    name = make_cluster(sshd3, tpuops_home, tmp_path)
    results = launch_and_follow(name, 'echo "worker $TPUOPS_WORKER_ID"; [ "$TPUOPS_WORKER_ID" != 1 ] || exit 7')
    assert {w: code for w, (code, _) in results.items()} == {"w0": 0, "w1": 7, "w2": 0}
    assert results["w2"][1] == ["worker 2"]
    state = Context.from_env().store.require(name)
    assert state.current_run.worker_states == {"w0": "exited 0", "w1": "exited 7", "w2": "exited 0"}
    cli = run_cli("launch", name, "--follow", "--", "exit 3", timeout=60)
    assert cli.returncode == 3, cli.stderr


def test_setup_runs_once_per_distinct_text(sshd3: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    def setup_count() -> list[int]:
        return [len((w.home / "setup.count").read_text().split()) if (w.home / "setup.count").exists() else 0
                for w in sshd3.workers]

    for w in sshd3.workers:
        (w.home / "setup.count").unlink(missing_ok=True)
    name = make_cluster(sshd3, tpuops_home, tmp_path, setup="echo ran >> ~/setup.count")
    ctx = Context.from_env()
    assert launch_run(ctx, name, LaunchOptions(command="true")).ok
    assert launch_run(ctx, name, LaunchOptions(command="true", replace=True)).ok
    assert setup_count() == [1, 1, 1]
    name = make_cluster(sshd3, tpuops_home, tmp_path, setup="echo ran >> ~/setup.count; true")
    assert launch_run(ctx, name, LaunchOptions(command="true", replace=True)).ok
    assert setup_count() == [2, 2, 2]
    assert launch_run(ctx, name, LaunchOptions(command="true", replace=True, force_setup=True)).ok
    assert setup_count() == [3, 3, 3]

    make_cluster(sshd3, tpuops_home, tmp_path, setup="exit 5")
    report = launch_run(ctx, name, LaunchOptions(command="true", replace=True))
    assert not report.ok and report.run_id is None
    assert report.steps[-1].name == "setup" and {r.exit_code for r in report.steps[-1].results} == {5}


def test_worst_exit_code() -> None:
    from tpuops.remote.base import RunResult

    assert worst_exit_code([RunResult("w0", 0, 1.0), RunResult("w1", 0, 1.0)]) == 0
    assert worst_exit_code([RunResult("w0", 0, 1.0), RunResult("w1", 3, 1.0), RunResult("w2", 1, 1.0)]) == 3
    assert worst_exit_code([RunResult("w0", 0, 1.0), RunResult("w1", None, 1.0, "lost")]) == 255


def _processes_with(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, timeout=10)
    return found.stdout.split()


def _session_leaders_with(marker: str) -> list[str]:
    """The processes whose command line holds `marker` and that lead their own session (setsid has run)."""
    leaders = []
    for pid in _processes_with(marker):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        session = stat.rsplit(")", 1)[1].split()[3]  # the fields after the command: state ppid pgrp session
        if session == pid:
            leaders.append(pid)
    return leaders


def _wait_for(check, timeout: float = 10.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_a_partial_start_is_stopped_everywhere(sshd3: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    import shutil

    name = make_cluster(sshd3, tpuops_home, tmp_path)
    runs = sshd3.workers[2].home / "tpuops" / name / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    runs.parent.mkdir(parents=True, exist_ok=True)
    runs.write_text("")  # w2 cannot create its run directory: its start fails
    marker = f"tpuops-partial-{uuid.uuid4().hex[:8]}"
    try:
        report = launch_run(Context.from_env(), name, LaunchOptions(command=f"sleep 300 # {marker}", replace=True))
    finally:
        runs.unlink()
    assert not report.ok and report.run_id is None
    start, stop_step = report.steps[-2:]
    assert (start.name, stop_step.name) == ("start", "stop")
    assert [r.worker for r in start.results if not r.ok] == ["w2"]
    assert _processes_with(marker) == []  # w0 and w1 did start, and were stopped again


# ---------------------------------------------------------------------------------------------- one at a time


def start_cli(*args: str) -> subprocess.Popen[str]:
    """`tpuops ARGS` in the background, as a second terminal would run it (stopped by the test)."""
    return subprocess.Popen([sys.executable, "-m", "tpuops", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy())


def end_cli(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return process.returncode, out, err


def wait_for_line(process: subprocess.Popen[str], *texts: str, timeout: float = 20.0,
                  stream: str = "stdout") -> list[str]:
    """Read the process's stdout (or stderr) until each of `texts` was in a line (a thread: every wait has its
    timeout)."""
    seen: list[str] = []
    found = threading.Event()

    def read() -> None:
        lines = getattr(process, stream)
        assert lines is not None
        for line in lines:
            seen.append(line)
            if all(any(text in line for line in seen) for text in texts):
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    assert found.wait(timeout), f"not all of {texts} within {timeout:g} s: {seen}"
    return seen


def test_a_second_launch_of_a_cluster_refuses_while_the_first_starts(sshd3: SshdCluster, tpuops_home: Path,
                                                                     tmp_path: Path) -> None:
    marker = f"tpuops-lock-{uuid.uuid4().hex[:8]}"
    release = f"{marker}.release"  # the setup holds the first launch (and its lock) until the test writes it
    wait = f"for i in $(seq 1200); do test -f ~/{release} && break; sleep 0.1; done"  # (2 minutes at most)
    name = make_cluster(sshd3, tpuops_home, tmp_path, setup=f"echo setting up; {wait}")
    owner = sshd3.workers[0].home / "tpuops" / name / "launch.owner"
    owner.unlink(missing_ok=True)
    first = start_cli("launch", name, "--setup", "--", f"sleep 300 # {marker}")
    try:
        wait_for_line(first, "[w0] setting up")  # the first holds the lock (its setup runs)
        run_id = owner.read_text().split()[0]
        second = run_cli("launch", name, "--", "true", timeout=60)
        assert second.returncode == 1, second.stderr
        [line] = second.stderr.splitlines()
        assert f"run {run_id} of '{name}' is being launched right now" in line and " UTC, from " in line
        assert "--replace" in line and "@" in line
        for worker in sshd3.workers:
            (worker.home / release).touch()
        code, _out, err = end_cli(first)
        assert code == 0, err
        # Started: a launch now finds it running, and says whose it is.
        third = run_cli("launch", name, "--", "true", timeout=60)
        assert third.returncode == 1
        [line] = third.stderr.splitlines()
        assert f"run {run_id} of '{name}' is still running on w0, w1, w2 (launched " in line
        assert "from " in line and "--replace" in line
        assert _processes_with(marker)
    finally:
        stop(Context.from_env(), name)
    assert _processes_with(marker) == []


def test_a_launcher_that_died_holding_the_lock_blocks_nobody(sshd3: SshdCluster, tpuops_home: Path,
                                                             tmp_path: Path) -> None:
    marker = f"tpuops-dead-{uuid.uuid4().hex[:8]}"
    # The first setup hangs; the next one (the killed launch's setup never finished) passes at once.
    name = make_cluster(sshd3, tpuops_home, tmp_path,
                        setup=f"test -f ~/{marker} && exit 0; touch ~/{marker}; echo setting up; sleep 60")
    first = start_cli("launch", name, "--setup", "--", "true")
    wait_for_line(first, "[w0] setting up", "[w1] setting up", "[w2] setting up")
    first.kill()  # no cleanup of its own: its sessions just end
    end_cli(first)
    # Without --replace a launch never waits for the lock: had the dead launcher's lock outlived its session
    # (until its heartbeat TTL), this launch would be refused at once.
    again = run_cli("launch", name, "--", f"sleep 300 # {marker}", timeout=60)
    try:
        assert again.returncode == 0, again.stderr
    finally:
        stop(Context.from_env(), name)
    # The killed launcher's setup (its text holds the marker too) ends with its SSH session: hangup.sh sends HUP,
    # then KILL after 3 s, while this test goes on.
    assert _wait_for(lambda: not _processes_with(marker), timeout=30), _processes_with(marker)


def test_replace_waits_for_the_launch_in_progress_then_replaces_its_run(sshd3: SshdCluster, tpuops_home: Path,
                                                                        tmp_path: Path) -> None:
    release = f"tpuops-release-{uuid.uuid4().hex[:8]}"
    # The first launch's setup holds its lock until the test lets it go (a fixed sleep raced a loaded machine).
    name = make_cluster(sshd3, tpuops_home, tmp_path,
                        setup=f"echo setting up; for i in $(seq 600); do test -f ~/{release} && break; sleep 0.1; done")
    old, new = f"tpuops-old-{uuid.uuid4().hex[:8]}", f"tpuops-new-{uuid.uuid4().hex[:8]}"
    first = start_cli("launch", name, "--setup", "--", f"sleep 300 # {old}")
    second = None
    try:
        wait_for_line(first, "[w0] setting up", timeout=60)
        second = start_cli("launch", name, "--replace", "--", f"sleep 300 # {new}")
        wait_for_line(second, "waiting for run", timeout=60, stream="stderr")
        for worker in sshd3.workers:
            (worker.home / release).touch()
        code, _, err = end_cli(second, timeout=90)
        assert code == 0, err
        assert end_cli(first)[0] == 0
        assert _processes_with(old) == [] and _processes_with(new)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        stop(Context.from_env(), name)


def test_a_launch_lock_whose_launcher_fell_silent_is_let_go_after_its_ttl(tmp_path: Path) -> None:
    """The launcher's machine went away without closing the connection: its heartbeat stops, and the holder on
    worker 0 lets go after the TTL (here 3 s; 60 s in use)."""
    from tpuops.remote.launch_lock import LaunchLock, LockBusy
    from tpuops.remote.local import LocalRunner
    from tpuops.shipped import script_command

    runner = LocalRunner("w0", tmp_path, {"PATH": os.environ["PATH"]})
    gone = threading.Event()

    def asleep():  # noqa: ANN202  one heartbeat, then silence with the input still open (a laptop asleep)
        yield b"."
        gone.wait(30)

    holder = threading.Thread(target=runner.run, args=(script_command("lock", "c", "r1", "me@laptop", "0", "3"),),
                              kwargs={"stdin": asleep()}, daemon=True)
    holder.start()
    try:
        assert _wait_for(lambda: (tmp_path / "tpuops" / "c" / "launch.owner").exists())
        with pytest.raises(LockBusy) as busy:
            LaunchLock(runner, "c", "r2", "you@desk").acquire()
        assert busy.value.owner is not None and (busy.value.owner.run_id, busy.value.owner.origin) == \
            ("r1", "me@laptop")
        deadline = time.monotonic() + 15
        while True:
            try:
                lock = LaunchLock(runner, "c", "r2", "you@desk")
                last = lock.acquire()
                break
            except LockBusy:
                assert time.monotonic() < deadline, "the silent holder never let go"
                time.sleep(0.5)
        lock.release()
        assert last is not None and last.run_id == "r1"
    finally:
        gone.set()
        holder.join(timeout=10)


# -------------------------------------------------------------------------------------- setup is part of the run


def test_setup_streams_shows_in_status_and_stop_ends_it(sshd3: SshdCluster, tpuops_home: Path,
                                                        tmp_path: Path) -> None:
    marker = f"tpuops-setup-{uuid.uuid4().hex[:8]}"
    # Python's output into a pipe is block-buffered: only an unbuffered setup shows its first line at once.
    setup = f"python3 -c \"import time; print('setup begins'); time.sleep(300); '{marker}'\""
    name = make_cluster(sshd3, tpuops_home, tmp_path, setup=setup)
    launch = start_cli("launch", name, "--setup", "--", "echo never started")
    try:
        wait_for_line(launch, "[w2] setup begins")
        assert _wait_for(lambda: set(run_states(Context.from_env(), name).values()) == {"setup"})
        stopped = run_cli("stop", name, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert "w0: killed (stopped setup of run " in stopped.stdout, stopped.stdout
        code, out, err = end_cli(launch)
    finally:
        if launch.poll() is None:
            launch.kill()
    assert code == 1
    assert "setup stopped by `tpuops stop`; the trainer was not started" in " ".join(err.split()), err
    assert "Terminated" not in err
    assert "never started" not in out
    assert _processes_with(marker) == []
    assert run_states(Context.from_env(), name) == {"w0": "killed", "w1": "killed", "w2": "killed"}


# ------------------------------------------------------------------------------------ stop ends the whole run


@pytest.mark.parametrize("cgroup", ["on", "off"])
def test_stop_ends_the_run_and_everything_it_started(sshd3: SshdCluster, tpuops_home: Path, tmp_path: Path,
                                                     cgroup: str) -> None:
    marker = f"tpuops-tree-{uuid.uuid4().hex[:8]}"
    name = make_cluster(sshd3, tpuops_home, tmp_path)
    spec = Path(Context.from_env().store.require(name).spec_path)
    spec.write_text(spec.read_text().replace('env: {MY_SETTING: "a b\'c"}', f"env: {{TPUOPS_RUN_CGROUP: '{cgroup}'}}"))
    # Children in their own sessions (setsid, and a double fork), which the run's process group does not hold;
    # with a cgroup, even one that clears its environment. And with it, a trainer that ignores TERM.
    children = (f"setsid sh -c 'sleep 300; : {marker}-a' & "
                f"setsid sh -c '(sleep 300; : {marker}-b) & :' & ")
    if cgroup == "on":
        children += f"setsid env -i sh -c 'sleep 300; : {marker}-c' & trap 'echo TERM ignored' TERM; "
    launched = run_cli("launch", name, "--", children + f"while :; do sleep 1; done # {marker}", timeout=60)
    assert launched.returncode == 0, launched.stderr
    expected = 4 if cgroup == "on" else 3
    assert _wait_for(lambda: len(_processes_with(marker)) >= expected * 3), _processes_with(marker)
    started = time.monotonic()
    stopped = run_cli("stop", name, timeout=90)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert [line.split(" (")[0] for line in stopped.stdout.splitlines() if line.startswith("w")] == \
        ["w0: killed", "w1: killed", "w2: killed"]
    if cgroup == "on":  # TERM ignored: KILL after the grace period, and stop waited for it to work
        assert time.monotonic() - started >= 10
        assert "ignored TERM for 10 s: KILLed" in stopped.stdout
    assert _processes_with(marker) == []


# ---------------------------------------------------------------------------------------- an unreachable worker


def test_one_unreachable_worker_fails_the_launch_once_within_the_connect_timeout(
        sshd3: SshdCluster, tpuops_home: Path, tmp_path: Path, refused_port: int) -> None:
    from datetime import datetime, timedelta, timezone

    from tpuops.access.cluster import REFUSED_TIMEOUT

    name = make_cluster(sshd3, tpuops_home, tmp_path)
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.txt").write_text("data")
    spec = Path(Context.from_env().store.require(name).spec_path)
    spec.write_text(spec.read_text() + "data: [{from: shards, to: shards}]\n")  # a second tree to push
    state_path = tpuops_home / "clusters" / name / "state.json"
    state = json.loads(state_path.read_text())
    # A 4-worker cluster whose worker 3 is down (nothing listens on its port), up for an hour (so a refusing
    # worker is a dead one, not one still booting: the remote commands give up on it after REFUSED_TIMEOUT).
    state["workers"].append(dict(state["workers"][0], index=3, internal_ip="127.0.0.1", external_ip="127.0.0.1",
                                 ssh_host="127.0.0.1", ssh_port=refused_port))
    an_hour_ago = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    state["resources"] = [{"kind": "tpu", "name": name, "zone": "europe-west4-a", "status": "created",
                           "updated_at": an_hour_ago}]
    state_path.write_text(json.dumps(state))

    started = time.monotonic()
    launched = run_cli("launch", name, "--", "true", timeout=120)
    took = time.monotonic() - started
    assert launched.returncode == 1, launched.stderr
    assert "1 of 4 workers failed: w3" in launched.stderr, launched.stderr
    assert launched.stderr.count("w3: 127.0.0.1") == 1, launched.stderr  # its one error, in the table
    assert "push" not in launched.stderr  # nothing sent to the others: the trainer could not start anyway
    assert took < 2 * REFUSED_TIMEOUT + 5, took  # one connect timeout, not one per step


def test_on_the_local_provider_too_one_launch_at_a_time_and_setup_is_part_of_the_run(tmp_path: Path) -> None:
    marker = f"tpuops-local-{uuid.uuid4().hex[:8]}"
    (tmp_path / "code").mkdir()
    spec = write_spec(tmp_path, f"""
        name: onelaunch
        provider: local
        tpu: {{type: v2-8, workers: 2}}
        bucket: {{name: onelaunch-b}}
        code: {{path: code}}
        trainer:
          framework: jax
          setup: echo setting up; sleep 60; echo {marker}
          command: echo never started
        """)
    assert run_cli("up", str(spec), timeout=60).returncode == 0
    first = start_cli("launch", "onelaunch")
    try:
        wait_for_line(first, "[w0] setting up", "[w1] setting up")
        status = run_cli("status", "onelaunch", timeout=60)
        assert "w0: setup (now)" in status.stdout and "w1: setup (now)" in status.stdout, status.stdout
        second = run_cli("run", str(spec), "--down", timeout=60)
        assert second.returncode == 1
        [line] = [line for line in second.stderr.splitlines() if line.startswith("tpuops: error:")]
        assert "of 'onelaunch' is being launched right now (since " in line and "--replace" in line
        assert "==> down" not in second.stderr  # the cluster is the first launch's: not deleted under it
        stopped = run_cli("stop", "onelaunch", timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert "w1: killed (stopped setup of run " in stopped.stdout
        code, out, err = end_cli(first)
        assert code == 1 and "never started" not in out
        assert "setup stopped by `tpuops stop`" in " ".join(err.split())
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
        run_cli("down", "onelaunch", "--yes", timeout=60)
    assert _processes_with(marker) == []
