"""`tpuops watch` and `tpuops run --watch`: preemption during a run on real sshd workers behind the GCP fakes.

The fake TPU API hands out the loopback addresses of the sshd workers (and their real host keys), so a
"recreated" node is served by the same sshd processes: same host keys, fresh TPU record. The trainer appends
one line per start to ~/attempts-CLUSTER on every worker, which is how the tests see each relaunch and its
TPUOPS_RESTART / TPUOPS_RESUME.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available, tpus_answer_at
from tpuops.context import Context
from tpuops.ops.watch import TpuView, Verdict, Watcher, WatchOptions, counts_as_preemption, judge_run, judge_tpu

ZONE = "us-central2-b"
WAIT_S = 90.0
# Small knobs: a poll every 0.2 s, first backoff 0.1 s (the CLI subprocesses read them from the environment).
FAST = {"TPUOPS_WATCH_INTERVAL": "0.2", "TPUOPS_WATCH_BACKOFF": "0.1", "TPUOPS_WATCH_UNHEALTHY_GRACE": "1"}

needs_sshd = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")


# ------------------------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize(("tpu", "expected"), [
    (TpuView("READY", "HEALTHY"), None),
    (TpuView("READY", "UNHEALTHY_MAINTENANCE"), None),  # judged with the run, after a grace period
    (TpuView("PREEMPTED"), ("recover", "TPU PREEMPTED")),
    (TpuView("TERMINATED"), ("recover", "TPU TERMINATED")),
    (TpuView("MISSING"), ("recover", "TPU MISSING")),
    (TpuView("MISSING", None, "SUSPENDED"), ("recover", "queued resource SUSPENDED")),
    (TpuView("MISSING", None, "FAILED"), ("recover", "queued resource FAILED")),
    (TpuView("READY", "HEALTHY", "ACTIVE", "x-1 PREEMPTED"),
     ("recover", "slice x-1 PREEMPTED (Multislice cannot go on with a slice missing)")),
    (TpuView("CREATING"), ("fine", "")),
    (TpuView("REPAIRING"), ("fine", "")),
])
def test_judge_tpu(tpu: TpuView, expected: tuple[str, str] | None) -> None:
    verdict = judge_tpu(tpu)
    assert (verdict.kind, verdict.reason) == expected if expected else verdict is None


@pytest.mark.parametrize(("states", "restart_on_failure", "kind", "code", "recreate"), [
    ({"w0": "running", "w1": "exited 3"}, False, "fine", 0, True),
    ({"w0": "exited 0", "w1": "exited 0"}, False, "ended", 0, True),
    ({"w0": "exited 0", "w1": "exited 3"}, False, "ended", 3, True),
    ({"w0": "exited 0", "w1": "exited 3"}, True, "recover", 3, False),  # relaunch only: the TPU is fine
    ({"w0": "lost", "w1": "none"}, False, "recover", 0, True),
    ({"w0": "lost", "w1": "unreachable"}, False, "fine", 0, True),  # waits out the grace period
    ({"w0": "killed", "w1": "exited 0"}, True, "ended", 1, True),  # `tpuops stop` is never undone
])
def test_judge_run(states: dict[str, str], restart_on_failure: bool, kind: str, code: int, recreate: bool) -> None:
    verdict = judge_run(states, restart_on_failure)
    assert (verdict.kind, verdict.exit_code, verdict.recreate) == (kind, code, recreate)
    assert verdict.origin == (None if kind == "fine" else "workers")


def test_where_a_verdict_came_from_is_its_origin_not_its_wording() -> None:
    """Pool churn counts what the TPU API said, however its reason is worded; nothing else, however worded."""
    for tpu in (TpuView("PREEMPTED"), TpuView("MISSING", None, "SUSPENDED"), TpuView("READY", None, None, "x-1 LOST")):
        said = judge_tpu(tpu)
        assert said is not None and said.origin == "tpu"
        assert counts_as_preemption(said) and counts_as_preemption(replace(said, reason="the node went away"))
    gone = judge_run({"w0": "lost", "w1": "none"}, False)
    assert not counts_as_preemption(replace(gone, reason="TPU workers gone"))  # the wording once decided it
    hang = Verdict("recover", "TPU looks hung: no step for 15m", origin="watchdog", confirmed=True)
    assert not counts_as_preemption(hang)


def test_a_wait_for_capacity_is_noted_by_the_phase_its_emitter_gave(tpuops_home: Path) -> None:
    said: list[tuple[str, str]] = []
    watcher = Watcher(Context.from_env(), "c", WatchOptions(),
                      on_event=lambda at, kind, text: said.append((kind, text)))
    watcher.up_progress("tpu", "c", "the zone is full", phase="waiting")  # any wording: the phase decides
    watcher.up_progress("tpu", "c", "still full", phase="waiting")  # the same phase: noted once
    watcher.up_progress("tpu", "c", "no capacity in us-central2-b")  # no phase given: no change
    assert [text for kind, text in said if kind == "recovery"] == ["waiting for capacity (tpu c: the zone is full)"]
    assert [kind for kind, _ in said].count("up") == 3  # every line printed


# ------------------------------------------------------------------------------------- GCP + sshd


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    if not sshd_available():
        pytest.skip("needs root and OpenSSH sshd")
    with SshdCluster(tmp_path_factory.mktemp("sshd-watch"), 2) as cluster:
        yield cluster


@pytest.fixture
def gcp(fake_gcp: FakeGcp, sshd2: SshdCluster, tpu_paths_in_worker_homes: None) -> FakeGcp:  # noqa: F811
    """The fakes giving every (re)created node the sshd workers' addresses and real host keys."""
    return tpus_answer_at(fake_gcp, lambda name, index: sshd2.workers[index])


def trainer(finish_at: int, marker: str) -> str:
    """Record the start, then train "forever" until restart `finish_at`, where it succeeds at once."""
    return (f'echo "restart=${{TPUOPS_RESTART:-0}} resume=${{TPUOPS_RESUME:-0}}" >> ~/attempts-$TPUOPS_CLUSTER; '
            f'[ "${{TPUOPS_RESTART:-0}}" -ge {finish_at} ] || sleep 300 # {marker}')


def make_cluster(sshd: SshdCluster, home: Path, tmp_path: Path, command: str) -> tuple[str, Path]:
    """A v4-16 (2 hosts) spec; the cluster key is the one the sshd workers authorise (as `up` would install)."""
    name = f"wt-{uuid.uuid4().hex[:8]}"
    spec = write_spec(tmp_path, f"""
        name: {name}
        zone: {ZONE}
        tpu: {{type: v4-16, runtime: tpu-ubuntu2204-base, preemptible: true}}
        ssh: {{user: root, port: {sshd.port}}}
        trainer:
          framework: jax
          command: {json.dumps(command)}
        """)
    cluster_dir = home / "clusters" / name
    cluster_dir.mkdir(parents=True)
    shutil.copy(sshd.client_key, cluster_dir / "id_ed25519")
    shutil.copy(sshd.client_key.with_suffix(".pub"), cluster_dir / "id_ed25519.pub")
    (cluster_dir / "id_ed25519").chmod(0o600)
    return name, spec


def attempts(sshd: SshdCluster, name: str) -> list[list[str]]:
    """Each worker's recorded starts."""
    return [(w.home / f"attempts-{name}").read_text().splitlines() if (w.home / f"attempts-{name}").exists()
            else [] for w in sshd.workers]


def state_of(home: Path, name: str) -> dict:
    return json.loads((home / "clusters" / name / "state.json").read_text())


def watching(home: Path, name: str) -> bool:
    """The watch has started (its first event is in the state, which `run` writes only once `up` begins)."""
    path = home / "clusters" / name / "state.json"
    return path.exists() and any(e["message"].startswith("watching run") for e in state_of(home, name)["events"])


def start_cli(gcp: FakeGcp, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tpuops", *args], env={**os.environ, **gcp.env, **FAST},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    return process.returncode, stdout, stderr


def wait_for(condition: Callable[[], bool], what: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if process.poll() is not None:
            _, stderr = process.communicate(timeout=10)
            raise AssertionError(f"tpuops ended (exit {process.returncode}) before {what}: {stderr[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def stop_leftovers(gcp: FakeGcp, name: str, marker: str) -> None:
    """No trainer may outlive its test: stop the cluster's run (best effort) and check by marker."""
    run_cli("stop", name, env=gcp.env, timeout=60)
    subprocess.run(["pkill", "-f", marker], timeout=10, check=False)  # only this test's unique marker


def node_calls(gcp: FakeGcp, method: str, name: str | None = None) -> int:
    pattern = rf"/nodes/{name}$" if name else r"/nodes$"
    return len(gcp.tpu_v2.server.calls(method, pattern))


@needs_sshd
def test_run_watch_recreates_a_preempted_tpu_waits_out_capacity_and_resumes(
        gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    marker = f"tpuops-watch-{uuid.uuid4().hex[:8]}"
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, trainer(finish_at=1, marker=marker))
    process = start_cli(gcp, "run", str(spec), "--watch", "--wait-for-capacity", "1m")
    try:
        wait_for(lambda: all(len(lines) == 1 for lines in attempts(sshd2, name)), "the first start", process)
        gcp.tpu.capacity_failures[ZONE] = 2  # the zone is full twice when the watch creates the node again
        gcp.tpu.preempt(ZONE, name)
        code, stdout, stderr = finish(process)
    finally:
        stop_leftovers(gcp, name, marker)
    assert code == 0, stderr[-3000:]

    # Deleted once, then created again: the first create, two refused for capacity, the one that worked.
    assert node_calls(gcp, "DELETE", name) == 1
    assert node_calls(gcp, "POST") == 4
    assert gcp.tpu.nodes[(ZONE, name)].state == "READY"
    # Relaunched on every worker with the restart count, and told to resume.
    assert attempts(sshd2, name) == [["restart=0 resume=0", "restart=1 resume=1"]] * 2

    state = state_of(tpuops_home, name)
    assert [run["restart"] for run in state["runs"]] == [0, 1]
    assert state["runs"][-1]["worker_states"] == {"w0": "exited 0", "w1": "exited 0"}
    restarts = [e for e in state["events"] if e["kind"] == "restart"]
    assert len(restarts) == 1 and "restart 1 after: TPU PREEMPTED" in restarts[0]["message"]
    # The wait for capacity is said once (where a guard keeps a ledger, it is kept there: its own goodput bucket).
    waits = [line for line in stderr.splitlines() if "recovery: waiting for capacity" in line]
    assert len(waits) == 1 and f"no capacity in {ZONE}" in waits[0], stderr[-3000:]
    # Every event was printed with its time.
    assert "TPU PREEMPTED: recovering (restart 1 of at most 10)" in stderr
    assert any(line[:8].count(":") == 2 and "recovery:" in line for line in stderr.splitlines())
    assert "every worker exited 0" in stdout

    shown = run_cli("status", name, env=gcp.env)
    assert shown.returncode == 0, shown.stderr
    assert "restarts: 1 (by `tpuops watch`)" in shown.stdout and "TPU PREEMPTED" in shown.stdout
    as_json = json.loads(run_cli("status", name, "--json", env=gcp.env).stdout)
    assert [r["message"] for r in as_json["restarts"]] == [restarts[0]["message"]]


@needs_sshd
def test_watch_gives_up_when_max_restarts_is_used_up(gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path,
                                                     tmp_path: Path) -> None:
    marker = f"tpuops-watch-{uuid.uuid4().hex[:8]}"
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, trainer(finish_at=99, marker=marker))
    assert run_cli("up", str(spec), env=gcp.env, timeout=WAIT_S).returncode == 0
    launched = run_cli("launch", name, env=gcp.env, timeout=WAIT_S)
    assert launched.returncode == 0, launched.stderr
    process = start_cli(gcp, "watch", name, "--max-restarts", "1")
    try:
        wait_for(lambda: watching(tpuops_home, name), "the watch", process)
        gcp.tpu.preempt(ZONE, name)
        wait_for(lambda: all(len(lines) == 2 for lines in attempts(sshd2, name)), "the relaunch", process)
        gcp.tpu.preempt(ZONE, name)  # again: one restart was allowed, and it is used
        code, _, stderr = finish(process)
    finally:
        stop_leftovers(gcp, name, marker)
    assert code == 1
    error = stderr.strip().splitlines()[-1]
    assert error.startswith("tpuops: error: TPU PREEMPTED, and --max-restarts 1 is used up: gave up"), error
    assert "hint:" in error
    assert node_calls(gcp, "DELETE", name) == 1 and node_calls(gcp, "POST") == 2
    assert gcp.tpu.nodes[(ZONE, name)].state == "PREEMPTED"  # giving up deletes nothing
    assert [e["kind"] for e in state_of(tpuops_home, name)["events"]][-1] == "gave-up"


@needs_sshd
def test_a_trainer_failing_by_itself_is_not_restarted(gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path,
                                                      tmp_path: Path) -> None:
    command = 'echo "restart=${TPUOPS_RESTART:-0}" >> ~/attempts-$TPUOPS_CLUSTER; [ "$TPUOPS_WORKER_ID" = 0 ] || exit 3'
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, command)
    done = run_cli("run", str(spec), "--watch", "--json", env={**gcp.env, **FAST}, timeout=WAIT_S)
    assert done.returncode == 3, done.stderr[-3000:]
    assert json.loads(done.stdout)["watch"]["restarts"] == 0
    assert "not restarted without --restart-on-failure" in done.stderr
    assert attempts(sshd2, name) == [["restart=0"]] * 2
    assert node_calls(gcp, "DELETE", name) == 0 and len(state_of(tpuops_home, name)["runs"]) == 1


@needs_sshd
def test_restart_on_failure_relaunches_on_the_same_tpu(gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path,
                                                       tmp_path: Path) -> None:
    command = 'echo "restart=${TPUOPS_RESTART:-0}" >> ~/attempts-$TPUOPS_CLUSTER; [ "${TPUOPS_RESTART:-0}" = 1 ]'
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, command)
    done = run_cli("run", str(spec), "--watch", "--restart-on-failure", env={**gcp.env, **FAST}, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert attempts(sshd2, name) == [["restart=0", "restart=1"]] * 2
    assert node_calls(gcp, "DELETE", name) == 0 and node_calls(gcp, "POST") == 1  # relaunched, not recreated


# ------------------------------------------------------------------------------------ local provider


def local_cluster(tmp_path: Path, finish_at: int) -> tuple[str, Path]:
    """A local 2-worker cluster whose trainer records each start outside the worker homes (recreating the
    node deletes those)."""
    name = f"wl-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "attempts"
    command = (f'echo "w$TPUOPS_WORKER_ID restart=${{TPUOPS_RESTART:-0}}" >> {log}; '
               f'[ "${{TPUOPS_RESTART:-0}}" -ge {finish_at} ] || sleep 300')
    spec = write_spec(tmp_path, f"""
        name: {name}
        provider: local
        tpu: {{type: v2-8, workers: 2}}
        trainer: {{framework: jax, command: {json.dumps(command)}}}
        """)
    return name, spec


def local_starts(tmp_path: Path) -> list[str]:
    log = tmp_path / "attempts"
    return sorted(log.read_text().splitlines()) if log.exists() else []


def test_local_provider_preempted_node_is_recreated(tmp_path: Path, tpuops_home: Path) -> None:
    name, spec = local_cluster(tmp_path, finish_at=1)
    process = subprocess.Popen([sys.executable, "-m", "tpuops", "run", str(spec), "--watch", "--down", "--json"],
                               env={**os.environ, **FAST}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(local_starts(tmp_path)) == 2, "the first start", process)
        record = tpuops_home / "local" / "tpus" / f"{name}.json"
        node = json.loads(record.read_text())
        record.write_text(json.dumps({**node, "state": "PREEMPTED"}))  # what a preemption looks like there
        code, stdout, stderr = finish(process)
    finally:
        run_cli("down", name, "--yes", timeout=60)
    assert code == 0, stderr[-3000:]
    assert local_starts(tmp_path) == ["w0 restart=0", "w0 restart=1", "w1 restart=0", "w1 restart=1"]
    summary = json.loads(stdout)
    assert summary["watch"]["restarts"] == 1 and summary["torn_down"]
    assert "TPU PREEMPTED: recovering" in stderr
    assert not (tpuops_home / "local" / "tpus" / f"{name}.json").exists()  # --down after the run succeeded


def test_local_provider_trainers_gone_without_exit_code_are_recovered(tmp_path: Path, tpuops_home: Path) -> None:
    import signal

    name, spec = local_cluster(tmp_path, finish_at=1)
    assert run_cli("up", str(spec), timeout=60).returncode == 0
    assert run_cli("launch", name, timeout=60).returncode == 0
    process = subprocess.Popen([sys.executable, "-m", "tpuops", "watch", name, "--down", "--json"],
                               env={**os.environ, **FAST}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: watching(tpuops_home, name), "the watch", process)
        # The hosts rebooted, say: every trainer's process group vanishes without writing an exit code.
        for pid_file in (tpuops_home / "local" / "workers" / name).glob(f"w*/tpuops/{name}/runs/*/pid"):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        code, stdout, stderr = finish(process)
    finally:
        run_cli("down", name, "--yes", timeout=60)
    assert code == 0, stderr[-3000:]
    assert "every worker's trainer is gone without an exit code: recovering" in stderr
    assert json.loads(stdout)["torn_down"] and not (tpuops_home / "local" / "tpus" / f"{name}.json").exists()
    assert local_starts(tmp_path) == ["w0 restart=0", "w0 restart=1", "w1 restart=0", "w1 restart=1"]


@needs_sshd
def test_suspended_queued_resource_is_deleted_and_queued_again(gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path,
                                                               tmp_path: Path) -> None:
    marker = f"tpuops-watch-{uuid.uuid4().hex[:8]}"
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, trainer(finish_at=1, marker=marker))
    spec.write_text(spec.read_text().replace("preemptible: true", "spot: true, queued: true"))
    process = start_cli(gcp, "run", str(spec), "--watch")
    try:
        wait_for(lambda: all(len(lines) == 1 for lines in attempts(sshd2, name)), "the first start", process)
        queued_name = next(iter(gcp.tpu.queued))[1]
        gcp.tpu.suspend_queued(ZONE, queued_name)  # spot capacity taken back: the node is gone
        code, _, stderr = finish(process)
    finally:
        stop_leftovers(gcp, name, marker)
    assert code == 0, stderr[-3000:]
    assert "queued resource SUSPENDED: recovering" in stderr
    assert len(gcp.tpu_v2.server.calls("DELETE", rf"/queuedResources/{queued_name}")) == 1
    assert len(gcp.tpu_v2.server.calls("POST", r"/queuedResources")) == 2
    assert gcp.tpu.queued[(ZONE, queued_name)].state == "ACTIVE"
    assert attempts(sshd2, name) == [["restart=0 resume=0", "restart=1 resume=1"]] * 2


@needs_sshd
def test_unhealthy_tpu_is_recovered_after_the_grace_period(gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path,
                                                           tmp_path: Path) -> None:
    marker = f"tpuops-watch-{uuid.uuid4().hex[:8]}"
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, trainer(finish_at=1, marker=marker))
    process = start_cli(gcp, "run", str(spec), "--watch")  # FAST: 1 s of grace
    try:
        wait_for(lambda: all(len(lines) == 1 for lines in attempts(sshd2, name)), "the first start", process)
        gcp.tpu.lose_worker(ZONE, name, 1)  # UNHEALTHY_MAINTENANCE; the trainers themselves keep running
        code, _, stderr = finish(process)
    finally:
        stop_leftovers(gcp, name, marker)
    assert code == 0, stderr[-3000:]
    assert "TPU health UNHEALTHY_MAINTENANCE: recovering unless it passes within 1s" in stderr
    assert "TPU health UNHEALTHY_MAINTENANCE for more than 1s: recovering" in stderr
    assert node_calls(gcp, "DELETE", name) == 1 and node_calls(gcp, "POST") == 2
    assert attempts(sshd2, name) == [["restart=0 resume=0", "restart=1 resume=1"]] * 2


@needs_sshd
def test_ctrl_c_stops_watching_and_deletes_nothing(gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path,
                                                   tmp_path: Path) -> None:
    import signal

    marker = f"tpuops-watch-{uuid.uuid4().hex[:8]}"
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, trainer(finish_at=1, marker=marker))
    process = start_cli(gcp, "run", str(spec), "--watch")
    try:
        wait_for(lambda: watching(tpuops_home, name), "the watch", process)
        process.send_signal(signal.SIGINT)
        code, _, stderr = finish(process)
        assert code == 130, stderr[-3000:]
        assert "stopped watching; nothing was deleted" in stderr
        assert node_calls(gcp, "DELETE", name) == 0 and gcp.tpu.nodes[(ZONE, name)].state == "READY"
        shown = run_cli("status", name, "--json", env=gcp.env)
        assert json.loads(shown.stdout)["tpu_state"] == "READY"
        assert subprocess.run(["pgrep", "-f", marker], capture_output=True, timeout=10).stdout  # still training
    finally:
        stop_leftovers(gcp, name, marker)


@needs_sshd
def test_recovery_attempts_without_capacity_are_bounded_by_max_restarts(
        gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    marker = f"tpuops-watch-{uuid.uuid4().hex[:8]}"
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, trainer(finish_at=1, marker=marker))
    process = start_cli(gcp, "run", str(spec), "--watch", "--max-restarts", "2")  # no --wait-for-capacity
    try:
        wait_for(lambda: all(len(lines) == 1 for lines in attempts(sshd2, name)), "the first start", process)
        gcp.tpu.capacity_failures[ZONE] = -1  # the zone stays full
        gcp.tpu.preempt(ZONE, name)
        code, _, stderr = finish(process)
    finally:
        stop_leftovers(gcp, name, marker)
    assert code == 1
    assert "attempt failed: no capacity for v4-16" in stderr  # the first failure, then a backoff and a retry
    error = stderr.strip().splitlines()[-1]
    assert error.startswith("tpuops: error: recovery failed 2 time(s), --max-restarts 2 is used up: no capacity"), \
        error
    assert node_calls(gcp, "POST") == 3  # the first create, then one per recovery attempt
    assert (ZONE, name) not in gcp.tpu.nodes
    assert attempts(sshd2, name) == [["restart=0 resume=0"]] * 2


@needs_sshd
def test_watch_moves_a_run_whose_zone_stays_full_to_the_next_pool_with_its_checkpoint(
        gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    from tpuops.cloud.gcp.gcs_blobs import GcsBlobStore

    marker = f"tpuops-watch-{uuid.uuid4().hex[:8]}"
    other = "us-east5-a"
    gcp.quotas.model.grant("TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI", {ZONE: 32, other: 32})
    command = (f'echo "restart=${{TPUOPS_RESTART:-0}} resume=${{TPUOPS_RESUME:-0}} ckpt=$TPUOPS_CHECKPOINT_DIR" '
               f'>> ~/attempts-$TPUOPS_CLUSTER; [ "${{TPUOPS_RESTART:-0}}" -ge 1 ] || sleep 300 # {marker}')
    name, spec = make_cluster(sshd2, tpuops_home, tmp_path, command)
    pools = (f"  pools:\n    - {{type: v4-16, zone: {ZONE}, provisioning: spot, runtime: tpu-ubuntu2204-base}}\n"
             f"    - {{type: v4-16, zone: {other}, provisioning: spot, runtime: tpu-ubuntu2204-base}}\n"
             "  move_after: 0s\n")
    text = spec.read_text().replace(f"zone: {ZONE}\n", "").replace(
        "tpu: {type: v4-16, runtime: tpu-ubuntu2204-base, preemptible: true}", "tpu:\n" + pools)
    spec.write_text(text + f'bucket: {{name: "{name}-{{region}}"}}\n'
                    + f'logs: {{tensorboard: "gs://{name}-us-central2/logs"}}\n')
    spec.write_text(spec.read_text().replace("  command:", f'  checkpoints: "gs://{name}-{{region}}/ckpt"\n  command:'))
    process = start_cli(gcp, "run", str(spec), "--watch")
    try:
        wait_for(lambda: all(len(lines) == 1 for lines in attempts(sshd2, name)), "the first start", process)
        saved = tmp_path / "step-100.bin"
        saved.write_bytes(b"w" * 4096)  # the trainer's checkpoint in the first region's bucket
        GcsBlobStore(f"{name}-us-central2", "ckpt", env=gcp.env).upload_file(saved, "step-100.bin")
        gcp.tpu.capacity_failures[ZONE] = -1  # the zone stays full once the TPU is preempted
        gcp.tpu.preempt(ZONE, name)
        code, _, stderr = finish(process)
    finally:
        stop_leftovers(gcp, name, marker)
    assert code == 0, stderr[-3000:]
    assert list(gcp.tpu.nodes) == [(other, name)]  # the same pool first (refused), then the next one
    first, moved = [f"gs://{name}-us-central2/ckpt", f"gs://{name}-us-east5/ckpt"]
    assert attempts(sshd2, name) == [[f"restart=0 resume=0 ckpt={first}", f"restart=2 resume=1 ckpt={moved}"]] * 2
    copied = GcsBlobStore(f"{name}-us-east5", "ckpt", env=gcp.env)
    assert copied.read_range("step-100.bin", 0, 10000) == b"w" * 4096
    state = state_of(tpuops_home, name)
    assert (state["zone"], state["pool"]) == (other, f"v4-16 spot in {other}")
    move = next(e for e in state["events"] if e["kind"] == "moved")
    assert move["pool"] == f"v4-16 spot in {other}"
    assert [e["pool"] for e in state["events"] if e["kind"] == "preempted"] == [f"v4-16 spot in {ZONE}"]
    assert move["message"].startswith(f"from pool v4-16 spot in {ZONE} to pool v4-16 spot in {other}: re-creating")
    assert f"checkpoints copied {first} -> {moved}: 1 object(s), 4096 bytes" in move["message"]
