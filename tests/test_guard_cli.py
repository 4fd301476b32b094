"""The guard's commands at their edges: the rehearsal refused where it cannot be done, the webhook URL kept
out of errors, and a guard that runs out of --max-restarts says so in the ledger."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.helpers import run_cli, write_spec
from tests.test_guard_local import FAST, cli, kinds, launched_cluster, ledger_of, wait_until
from tpuops.state import ClusterState, StateStore, TpuRecord


def test_simulate_preempt_refuses_on_google_cloud(tmp_path: Path, tpuops_home: Path) -> None:
    spec = write_spec(tmp_path, """
        name: real-tpu
        zone: us-central2-b
        tpu: {type: v4-8}
        """)
    state = ClusterState(name="real-tpu", provider="gcp", project="p", zone="us-central2-b", spec_path=str(spec),
                         resources=[TpuRecord(name="real-tpu", zone="us-central2-b", status="created")])
    StateStore(tpuops_home).save(state)
    done = run_cli("simulate", "preempt", "real-tpu")
    assert done.returncode == 2
    assert done.stderr.startswith("tpuops: error: Google Cloud has no API to preempt a TPU on request")
    assert "provider: local" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_webhook_that_is_not_a_url_is_refused_without_repeating_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: q
        provider: local
        tpu: {type: v2-8}
        guard: {notify: "hooks.slack.com/services/T0/B0/SECRETTOKEN"}
        """)
    done = run_cli("plan", str(spec))
    assert done.returncode == 2 and "guard.notify must be an http(s):// webhook URL" in done.stderr
    assert "SECRETTOKEN" not in done.stderr + done.stdout


def test_guard_status_without_a_guard(tmp_path: Path, tpuops_home: Path) -> None:
    name = f"gn-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, f"""
        name: {name}
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        bucket: {{name: {name}-b}}
        """)
    assert cli("up", str(spec)).returncode == 0
    try:
        done = cli("guard", "status", name)
        assert done.returncode == 1 and f"no guard (start one with `tpuops guard up {name}`)" in done.stdout
    finally:
        cli("down", name, "--yes", "--delete-bucket", "--force")


def test_max_restarts_used_up_is_said_in_the_ledger(tmp_path: Path, tpuops_home: Path) -> None:
    name = launched_cluster(tmp_path, "gm")
    guard = subprocess.Popen([sys.executable, "-m", "tpuops", "watch", name, "--headless", "--max-restarts", "0"],
                             env={**os.environ, **FAST}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    ledger = ledger_of(tpuops_home, f"{name}-b", name)
    try:
        wait_until(lambda: "watch" in kinds(ledger), "the guard to start")
        assert cli("simulate", "preempt", name).returncode == 0
        wait_until(lambda: "gave-up" in kinds(ledger), "the guard to give up")
        # Longer than a heartbeat may age (3 x 1 s): the guard idles (under systemd's Restart=always an exit would
        # loop), and its heartbeat goes on, so status does not call it dead.
        time.sleep(3.5)
        assert guard.poll() is None
        events = [event for _, event in ledger.events()]
        status = cli("guard", "status", name)
    finally:
        if guard.poll() is None:
            guard.terminate()
        output, _ = guard.communicate(timeout=30)
        cli("down", name, "--yes", "--delete-bucket", "--force")
    assert "is over: waiting for the next `tpuops launch" in output, output
    gave_up = [event for event in events if event.kind == "gave-up"]
    assert gave_up and "--max-restarts 0 is used up" in gave_up[0].message
    assert "restart" not in [event.kind for event in events]
    assert status.returncode == 0, status.stderr
    assert "guard: alive, idle: waiting for the next `tpuops launch" in status.stdout, status.stdout
    assert "gave-up" in status.stdout  # the last events say why


def test_the_guard_idles_after_its_run_ended_and_watches_the_next_one(tmp_path: Path, tpuops_home: Path) -> None:
    """Under systemd's Restart=always a guard that exited after the run would be started again and again: it
    records the end in the ledger and waits for the next launch, also when started again after that end."""
    name = launched_cluster(tmp_path, "gi", command="sleep 1")
    ledger = ledger_of(tpuops_home, f"{name}-b", name)

    def start_guard() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "tpuops", "watch", name, "--headless"],
                                env={**os.environ, **FAST}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    guards = [start_guard()]
    try:
        wait_until(lambda: "ended" in kinds(ledger), "the run to end")
        time.sleep(1.5)  # three polls
        assert guards[0].poll() is None  # idle, not exited
        assert cli("launch", name).returncode == 0  # the next run: watched to its end as well
        wait_until(lambda: kinds(ledger).count("ended") == 2, "the second run to end")
        guards[0].terminate()
        guards[0].communicate(timeout=30)
        guards.append(start_guard())  # started again (a reboot): the ended run is not watched again
        time.sleep(2.0)
        assert guards[1].poll() is None and kinds(ledger).count("ended") == 2
        ended = [event.data.get("run_id") for _, event in ledger.events() if event.kind == "ended"]
        assert len(set(ended)) == 2 and None not in ended
    finally:
        outputs = []
        for guard in guards:
            if guard.poll() is None:
                guard.terminate()
            outputs.append(guard.communicate(timeout=30)[0])
        cli("down", name, "--yes", "--delete-bucket", "--force")
    assert "is over: waiting for the next `tpuops launch" in outputs[0], outputs[0]
    assert "watching run" not in outputs[1], outputs[1]


def test_up_guard_starts_a_guard_that_waits_for_the_run_and_down_stops_it(tmp_path: Path, tpuops_home: Path) -> None:
    from tpuops.providers.local_guard_host import is_guard_process

    name = f"gu-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, f"""
        name: {name}
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        bucket: {{name: {name}-b}}
        trainer: {{framework: jax, command: "sleep 300"}}
        """)
    up = cli("up", str(spec), "--guard")
    pid_file = tpuops_home / "local" / "guards" / name / "guard.pid"
    try:
        assert up.returncode == 0 and "guard: process pid" in up.stdout, up.stderr
        pid = int(pid_file.read_text())
        log = pid_file.with_name("guard.log")
        wait_until(lambda: "has no run yet: waiting" in log.read_text(), "the guard to wait for a run")
        assert cli("launch", name).returncode == 0
        wait_until(lambda: "watching run" in log.read_text(), "the guard to watch the run")
        down = cli("down", name, "--yes", "--delete-bucket", "--force")
        assert down.returncode == 0, down.stderr
        assert not is_guard_process(pid, name) and not pid_file.exists()
    finally:
        if pid_file.exists():
            cli("guard", "down", name)
            cli("down", name, "--yes", "--delete-bucket", "--force")
