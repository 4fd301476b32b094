"""`status` says what is true now or how old it is. The guard: "alive" only for a guard that runs and beats on
time; stopped is stopped; a laptop watch is not a guard. The run and the watchdog: what was recorded while the TPU
ran is not shown as true of a TPU that is no longer READY."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tpuops.context import Context
from tpuops.guard.ledger import Heartbeat, LedgerEvent
from tpuops.guard.report import GuardReport
from tpuops.ops.status import RunStatus, run_status, watchdog_now
from tpuops.providers.guard_host import GuardHostInfo
from tpuops.state import ClusterState, RunRecord
from tpuops.watchdog.records import WatchdogView

PROCESS = GuardHostInfo("process", "pid 42", None, "running")


def report(beat: Heartbeat | None, *events: LedgerEvent, host: GuardHostInfo | None = PROCESS,
           current_run: str | None = None) -> GuardReport:
    return GuardReport("c", host, beat, None, 0, events, None, current_run=current_run)


@pytest.fixture(autouse=True)
def still_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ages the lines print are read from the clock: held still, a loaded machine cannot make 30s into 31s."""
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)


def beat(age: float, role: str = "guard", **fields: object) -> Heartbeat:
    # aged from now, not from the module's import: what state_line prints is read at once
    return Heartbeat(time.time() - age, f"{role}@here", role, interval=60.0, **fields)  # type: ignore[arg-type]


def test_a_running_guard_that_beats_on_time_is_alive() -> None:
    shown = report(beat(30, run_id="r1"), current_run="r1")
    assert shown.alive and shown.state_line().startswith("alive (heartbeat 30s ago; process pid 42)")


def test_a_guard_stopped_by_guard_down_is_stopped_while_its_last_beat_is_fresh() -> None:
    down = LedgerEvent(time.time() - 5, "guard-down", "the guard was stopped (`guard down`)")
    shown = report(beat(44, idle="the next `tpuops launch c` (run r1 is over)"), down, host=None)
    assert not shown.alive
    assert shown.state_line().startswith("stopped by `tpuops guard down` (no guard host; last heartbeat 44s ago)")


def test_a_guard_whose_host_does_not_run_is_not_alive() -> None:
    shown = report(beat(10), host=GuardHostInfo("vm", "c-guard", "us-central2-b", "stopped"))
    assert not shown.alive and shown.state_line().startswith("not running (vm c-guard")


def test_a_heartbeat_two_intervals_old_is_dead() -> None:
    shown = report(beat(121))
    assert not shown.alive and shown.state_line().startswith("dead: last heartbeat 2m1s ago")


def test_a_laptop_watch_is_not_a_guard_alive_or_ended() -> None:
    watching = report(beat(39, role="watch"), host=None)
    assert not watching.alive and watching.state_line().startswith("no guard: a laptop `tpuops watch` is watching")
    ended = report(beat(39, role="watch", stopped="the laptop's `tpuops watch` ended"), host=None)
    assert not ended.alive
    assert ended.state_line().startswith("not running: the last watcher, a laptop `tpuops watch`, ended 39s ago")


def test_an_idle_guard_says_it_takes_up_a_run_launched_since_its_last_beat() -> None:
    idle = beat(20, run_id="r1", idle="the next `tpuops launch c` (run r1 is over)")
    assert report(idle, current_run="r1").state_line().startswith("alive, idle: waiting for the next")
    assert report(idle, current_run="r2").state_line().startswith("alive, taking up run r2")


def test_a_run_recorded_running_is_unknown_on_a_preempted_tpu(tmp_path: Path) -> None:
    ctx = Context.from_env(env={"TPUOPS_HOME": str(tmp_path)})
    run = RunRecord(id="r1", command="python3 train.py", workers=["w0", "w1"],
                    worker_states={"w0": "running", "w1": "exited 0"})
    state = ClusterState(name="c", provider="local", spec_path=str(tmp_path / "spec.yaml"), runs=[run])
    shown = run_status(ctx, state, None, "PREEMPTED")
    assert shown is not None and not shown.live
    assert shown.workers == {"w0": "unknown (the TPU is PREEMPTED; last recorded running)", "w1": "exited 0"}
    gone = run_status(ctx, state, None, None)
    assert gone is not None and gone.workers["w0"] == "unknown (the TPU is gone; last recorded running)"


def test_the_watchdogs_ok_is_not_shown_for_a_run_that_no_longer_runs() -> None:
    view = WatchdogView("r1", 231, time.time() - 82, 600.0, "ok", time.time() - 80)
    running = RunStatus("r1", "x", "t", 0, {"w0": "running"}, live=True)
    finished = RunStatus("r1", "x", "t", 0, {"w0": "exited 0"}, live=True)
    assert watchdog_now(view, "READY", running) == view
    assert watchdog_now(view, "READY", finished).verdict == "not watching: the run is over"  # type: ignore[union-attr]
    assert watchdog_now(view, None, running).verdict == "not watching: the TPU is gone"  # type: ignore[union-attr]
