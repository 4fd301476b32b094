"""`tpuops guard` on the local provider, as users run it: the guard a detached process that outlives the CLI
which started it, the run resumed from its checkpoint after `tpuops simulate preempt` with no CLI attached,
a laptop `watch` that only views, a SIGKILLed guard that keeps its lease and ledger, two guards that race
for one lease, and a status call that fails after a single dead-TPU sighting (no recovery)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fakes.http import SHUTDOWN_POLL_S
from tests.helpers import run_cli, write_spec
from tests.logs_writers import TbWriter, event_file_name
from tests.test_quickstart import long_quickstart, processes_under
from tpuops.cloud.local.layout import bucket_path
from tpuops.guard.lease import read_lease
from tpuops.guard.ledger import Ledger
from tpuops.providers.local_guard_host import is_guard_process, stop_process_group

FAST = {"TPUOPS_WATCH_INTERVAL": "0.5", "TPUOPS_WATCH_BACKOFF": "0.2", "TPUOPS_GUARD_HEARTBEAT": "1"}
WAIT_S = 120.0


def wait_until(condition: Callable[[], object], what: str, timeout: float = WAIT_S) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=FAST, timeout=timeout)


def launched_cluster(tmp_path: Path, prefix: str, workers: int = 1, command: str = "sleep 300") -> str:
    """A local cluster with a bucket (where the lease and ledger live), up and running `command`."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, f"""
        name: {name}
        provider: local
        tpu: {{type: v2-8, workers: {workers}}}
        bucket: {{name: {name}-b}}
        trainer: {{framework: jax, command: "{command}"}}
        """)
    assert cli("up", str(spec)).returncode == 0
    assert cli("launch", name).returncode == 0
    return name


def guard_dir(home: Path, name: str) -> Path:
    return home / "local" / "guards" / name


def guard_pid(home: Path, name: str) -> int | None:
    try:
        return int((guard_dir(home, name) / "guard.pid").read_text())
    except FileNotFoundError:
        return None


def ledger_of(home: Path, bucket: str, name: str) -> Ledger:
    from tpuops.cloud.blobs import DirBlobStore

    return Ledger(DirBlobStore(home / "local" / "buckets" / bucket / ".tpuops" / name / "guard"))


def kinds(ledger: Ledger) -> list[str]:
    return [event.kind for _, event in ledger.events()]


@pytest.fixture
def quickstart(tmp_path: Path, tpuops_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A long quickstart run started with `run --detach` (checkpoint every 100 steps), torn down afterwards
    with every process it or its guard started."""
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)
    spec = long_quickstart(tmp_path, steps=40000)
    spec.write_text(spec.read_text().replace("--steps 40000", "--steps 40000 --checkpoint-every 100"))
    started = cli("run", str(spec), "--detach", timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield str(spec)
    finally:
        pid = guard_pid(tpuops_home, "quickstart")
        run_cli("down", "quickstart", "--yes", "--delete-bucket", "--force", timeout=120)
        if pid is not None and is_guard_process(pid, "quickstart"):
            stop_process_group(pid)
        assert processes_under(tpuops_home / "local" / "workers") == []


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict]]]:
    """A loopback endpoint standing for a Slack webhook: its URL (the secret) and what it received."""
    received: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/services/T0/B0/SECRET-{uuid.uuid4().hex[:6]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_the_guard_recovers_a_preemption_with_no_cli_attached(quickstart: str, tpuops_home: Path,
                                                              webhook: tuple[str, list[dict]]) -> None:
    url, received = webhook
    spec = Path(quickstart)
    spec.write_text(spec.read_text() + f"guard: {{notify: '{url}'}}\n")
    # An earlier run's event file in the same logdir, with steps far beyond this run's: the guard's steps (and
    # so the steps lost) are this run's own.
    logdir = bucket_path(tpuops_home / "local", "gs://tpuops-quickstart/quickstart/logs")
    earlier = TbWriter(logdir)
    earlier.scalars(range(0, 99_001, 33_000))
    earlier.close()
    earlier.path.rename(logdir / event_file_name(0))
    up = cli("guard", "up", "quickstart")
    assert up.returncode == 0 and "guard: process pid" in up.stdout, up.stderr
    pid = guard_pid(tpuops_home, "quickstart")
    assert pid is not None and is_guard_process(pid, "quickstart")  # the CLI that started it has exited
    again = cli("guard", "up", "quickstart")  # idempotent: adopts the running guard
    assert again.returncode == 0 and guard_pid(tpuops_home, "quickstart") == pid
    ledger = ledger_of(tpuops_home, "tpuops-quickstart", "quickstart")
    wait_until(lambda: (ledger.heartbeat() or None) and ledger.heartbeat().step, "the guard to see steps")

    preempted = cli("simulate", "preempt", "quickstart")
    assert preempted.returncode == 0, preempted.stderr
    recovered = wait_until(lambda: [e for _, e in ledger.events() if e.kind == "recovered"], "the recovery")
    facts = recovered[0].data
    # charlm resumed from its last checkpoint (a multiple of 100), not from step 1
    assert facts["first_step_after"] > 1 and (facts["first_step_after"] - 1) % 100 == 0
    assert facts["steps_lost"] == facts["step_before"] - facts["first_step_after"] + 1 >= 0
    assert facts["step_before"] < 40000  # not the earlier run's 99,000
    assert kinds(ledger).index("preemption") < kinds(ledger).index("restart") < kinds(ledger).index("recovered")

    # status reads the heartbeat, which the guard rewrites after the recovered event: wait for it to count it
    wait_until(lambda: (beat := ledger.heartbeat()) is not None and beat.recoveries == 1, "the heartbeat's count")
    status = cli("status", "quickstart")
    assert status.returncode == 0, status.stderr
    line = next(text for text in status.stdout.splitlines() if text.strip().startswith("guard:"))
    assert "alive (heartbeat" in line and "1 recovery" in line and "goodput so far" in line, line
    assert f"{facts['steps_lost']} step(s) lost" in line or facts["steps_lost"] == 0
    assert "restarts: 1 (by the guard)" in status.stdout, status.stdout  # not "by `tpuops watch`"
    report = json.loads(cli("guard", "status", "quickstart", "--json").stdout)
    assert report["alive"] and report["recoveries"] == 1 and report["heartbeat"]["goodput"]["paid_s"] > 0
    assert "recovered: training resumed" in cli("guard", "logs", "quickstart").stdout
    wait_until(lambda: any(m["kind"] == "recovered" for m in received), "the webhook's POST")
    hook = next(m for m in received if m["kind"] == "recovered")
    assert hook["cluster"] == "quickstart" and hook["steps_lost"] == facts["steps_lost"]
    secret = url.rsplit("/", 1)[1]
    shown = [status.stdout, json.dumps(report), (guard_dir(tpuops_home, "quickstart") / "guard.log").read_text(),
             (tpuops_home / "clusters" / "quickstart" / "state.json").read_text(),
             cli("status", "quickstart", "--json").stdout, cli("plan", quickstart).stdout]
    assert not [text for text in shown if secret in text]  # the webhook URL is a secret


def test_a_laptop_watch_views_and_a_killed_guard_keeps_lease_and_ledger(quickstart: str, tpuops_home: Path) -> None:
    assert cli("guard", "up", "quickstart").returncode == 0
    ledger = ledger_of(tpuops_home, "tpuops-quickstart", "quickstart")
    store = ledger.store
    wait_until(lambda: ledger.heartbeat(), "the first heartbeat")
    holder = read_lease(store)[0].holder
    tpu_record = (tpuops_home / "local" / "tpus" / "quickstart.json").read_text()

    said = tpuops_home / "viewer.err"
    with said.open("w") as err:
        viewer = subprocess.Popen([sys.executable, "-m", "tpuops", "watch", "quickstart"],
                                  env={**os.environ, **FAST}, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        # Until it has printed the guard's own event from the ledger (a few of its polls; longer under load).
        wait_until(lambda: "watching run" in said.read_text(), "the viewer to print the guard's events")
        viewer.send_signal(signal.SIGINT)
        viewer.wait(timeout=30)
    finally:
        if viewer.poll() is None:
            viewer.kill()
            viewer.wait(timeout=10)
    stderr = said.read_text()
    assert "holds the lease and recovers 'quickstart'" in stderr and "deletes and creates nothing" in stderr
    assert "watching run" in stderr  # the guard's own event, printed from the ledger
    assert (tpuops_home / "local" / "tpus" / "quickstart.json").read_text() == tpu_record  # nothing touched
    assert read_lease(store)[0].holder == holder

    old_pid = guard_pid(tpuops_home, "quickstart")
    os.kill(old_pid, signal.SIGKILL)
    wait_until(lambda: not is_guard_process(old_pid, "quickstart"), "the guard to die")
    events_before = kinds(ledger)
    assert cli("guard", "up", "quickstart").returncode == 0
    new_pid = guard_pid(tpuops_home, "quickstart")
    assert new_pid != old_pid
    log = guard_dir(tpuops_home, "quickstart") / "guard.log"
    wait_until(lambda: log.read_text().count("watching run") >= 2, "the new guard to watch")
    assert "waiting until it is free or stale" not in log.read_text()  # its own lease: taken back at once
    assert read_lease(store)[0].holder == holder
    assert kinds(ledger)[:len(events_before)] == events_before  # the ledger goes on

    assert cli("guard", "down", "quickstart").returncode == 0
    assert not is_guard_process(new_pid, "quickstart")
    stopped = cli("guard", "status", "quickstart")  # at once: its last heartbeat is still fresh
    assert stopped.returncode == 1 and "stopped by `tpuops guard down`" in stopped.stdout, stopped.stdout
    assert "alive" not in stopped.stdout and "guard: stopped" in cli("status", "quickstart").stdout
    assert cli("down", "quickstart", "--yes").returncode == 0


def test_two_guards_race_and_exactly_one_recovers(tmp_path: Path, tpuops_home: Path) -> None:
    name = launched_cluster(tmp_path, "gr", workers=2)
    guards = [subprocess.Popen([sys.executable, "-m", "tpuops", "watch", name, "--headless"],
                               env={**os.environ, **FAST, "TPUOPS_GUARD_HOLDER": f"guard@{who}"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
              for who in ("a", "b")]
    ledger = ledger_of(tpuops_home, f"{name}-b", name)
    try:
        wait_until(lambda: read_lease(ledger.store)[0], "one guard to take the lease")
        time.sleep(1.5)  # both have polled the lease at least once
        assert cli("simulate", "preempt", name).returncode == 0
        wait_until(lambda: "restart" in kinds(ledger), "the relaunch")
        time.sleep(3)  # room for a second recovery, were there one
    finally:
        for guard in guards:
            if guard.poll() is None:
                os.killpg(guard.pid, signal.SIGTERM)
        outputs = [guard.communicate(timeout=30)[0] for guard in guards]
        events = [event for _, event in ledger.events()]
        cli("down", name, "--yes", "--delete-bucket", "--force")
    recoverers = {event.holder for event in events if event.kind in ("preemption", "restart")}
    assert len(recoverers) == 1, outputs
    assert [event.kind for event in events].count("restart") == 1
    waiting = [out for out in outputs if "waiting until it is free or stale" in out]
    assert len(waiting) == 1, outputs
    assert processes_under(tpuops_home / "local" / "workers") == []


def test_a_dead_tpu_seen_once_then_failed_status_calls_do_not_recover(tmp_path: Path, tpuops_home: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuops.context import Context
    from tpuops.ops.guard_loop import GuardedWatcher
    from tpuops.ops.watch import WatchOptions

    name = launched_cluster(tmp_path, "gs")
    record = tpuops_home / "local" / "tpus" / f"{name}.json"
    ready = record.read_text()
    ledger = ledger_of(tpuops_home, f"{name}-b", name)
    watcher = GuardedWatcher(Context.from_env(), name, WatchOptions(poll_interval=0.01, backoff=0.01),
                             ledger=ledger)
    try:
        record.write_text(ready.replace('"READY"', '"PREEMPTED"'))  # one poll's word for it ...
        assert watcher.step() is None
        for _ in range(2):  # ... then the status call fails twice (the API answers garbage)
            record.write_text("{not json")
            assert watcher.step() is None
        record.write_text(ready)
        assert watcher.step() is None
        seen = kinds(ledger)
    finally:
        record.write_text(ready)
        cli("down", name, "--yes", "--delete-bucket", "--force")
    assert "preemption" not in seen and "restart" not in seen and "recovery" not in seen, seen
    assert seen.count("observe") == 1  # the failed reads, said once
