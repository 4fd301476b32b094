"""What `guard status` and the `guard:` line of `status` say, from a heartbeat, the ledger's events and the guard
host: "alive" only for a guard that runs and beats on time; stopped is stopped; a laptop watch is not a guard."""

from __future__ import annotations

import time

from tpuops.guard.host import GuardHostInfo
from tpuops.guard.ledger import Heartbeat, LedgerEvent
from tpuops.guard.report import GuardReport

NOW = time.time()
PROCESS = GuardHostInfo("process", "pid 42", None, "running")


def report(beat: Heartbeat | None, *events: LedgerEvent, host: GuardHostInfo | None = PROCESS,
           current_run: str | None = None) -> GuardReport:
    return GuardReport("c", host, beat, None, 0, events, None, current_run=current_run)


def beat(age: float, role: str = "guard", **fields: object) -> Heartbeat:
    return Heartbeat(NOW - age, f"{role}@here", role, interval=60.0, **fields)  # type: ignore[arg-type]


def test_a_running_guard_that_beats_on_time_is_alive() -> None:
    shown = report(beat(30, run_id="r1"), current_run="r1")
    assert shown.alive and shown.state_line().startswith("alive (heartbeat 30s ago; process pid 42)")


def test_a_guard_stopped_by_guard_down_is_stopped_while_its_last_beat_is_fresh() -> None:
    down = LedgerEvent(NOW - 5, "guard-down", "the guard was stopped (`guard down`)")
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
