"""The goodput fold (tpuops/guard/goodput.py) against a wall clock: every interval in exactly one bucket, shares
in [0, 1], advancing never above paid, over histories with preemptions, recoveries and hangs in every order
(all orders of the events of a recovery, and seeded random histories; hypothesis is not a dependency)."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import asdict

import pytest

from tpuops.guard.goodput import BUCKETS, RUN_PHASES, Goodput, Mark, Segment, Tick, clip, observe, replay
from tpuops.guard.ledger import Heartbeat, Progress

EPS = 1e-6


def check(tally: Goodput, segments: list[Segment] | None = None) -> None:
    """What must hold of any tally, whatever was observed."""
    if tally.started is None:
        return
    assert all(value >= -EPS for value in tally.seconds.values()), tally.seconds
    assert abs(tally.wall_s - (tally.last - tally.started)) <= EPS  # the parts add up to the whole
    assert -EPS <= tally.paid_s <= tally.wall_s + EPS
    on_tpu = sum(tally.seconds[b] for b in (*RUN_PHASES, "lost", "hang"))
    assert tally.advancing_s <= on_tpu + EPS and on_tpu <= tally.paid_s + EPS  # advancing <= paid
    for share in (tally.scheduling, tally.runtime, tally.overall):
        assert share is None or 0.0 <= share <= 1.0
    if segments is not None:
        by_bucket = clip(segments, tally.started, tally.last)
        for bucket in BUCKETS:
            assert abs(by_bucket[bucket] - tally.seconds[bucket]) <= EPS, bucket
        assert abs(by_bucket["paid"] - tally.paid_s) <= EPS
        ordered = sorted(segments, key=lambda s: s.start)
        assert all(a.end <= b.start + EPS for a, b in itertools.pairwise(ordered))  # no interval counted twice


def random_history(rng: random.Random, length: int) -> list[Tick | Mark]:
    """Polls, scalars and the guard's events in any order, with a clock that mostly advances (sometimes not)."""
    now, step, history = 1000.0, 0, []
    for _ in range(length):
        now += rng.choice((0.0, rng.uniform(0, 5), rng.uniform(0, 300), -rng.uniform(0, 20)))
        what = rng.randrange(12)
        if what < 4:
            state = rng.choice(("READY", "READY", "PREEMPTED", "CREATING", None))
            history.append(Tick(now, state))
        elif what < 6:
            step = max(0, step + rng.randint(-50, 100))  # a resumed run reads steps from before too
            history.append(Tick(now, rng.choice(("READY", None)), tuple(range(max(0, step - 3), step + 1))))
        elif what == 6:
            history.append(Mark(now, rng.choice(("preemption", "failure")), {"step_before": step}))
        elif what == 7:
            history.append(Mark(now, "hang", rng.choice(({"step_before": step, "lost_for": rng.uniform(0, 2000)},
                                                         {}))))  # the guard's note, or a watchdog's suspicion
        elif what == 8:
            history.append(Mark(now, "recovery", {"phase": rng.choice(("waiting", "provisioning", "setup"))}))
        elif what == 9:
            history.append(Mark(now, rng.choice(("restart", "trouble", "recovered", "observe"))))
        else:
            history.append(Mark(now, rng.choice(("watch", "ended", "gave-up", "restart"))))
    return history


def test_random_histories_add_up_to_the_wall_clock() -> None:
    for seed in range(500):
        rng = random.Random(seed)
        tally, segments = Goodput(), []
        for seen in random_history(rng, rng.randint(1, 80)):
            before = tally
            tally = observe(tally, seen, segments)
            if tally.started != before.started:  # a new run after an end: its own segments from here
                segments.clear()
            check(tally, segments)
        assert Goodput.from_json(json.loads(json.dumps(asdict(tally)))) == tally  # what a heartbeat carries
        assert Goodput.from_json(tally.as_dict()).wall_s == pytest.approx(tally.wall_s, abs=1.0)  # as shown


RECOVERY = (Tick(0, "PREEMPTED"), Mark(0, "preemption", {"step_before": 500}),
            Mark(0, "hang", {"step_before": 500, "lost_for": 90.0}),
            Mark(0, "recovery", {"phase": "provisioning"}), Mark(0, "recovery", {"phase": "setup"}),
            Mark(0, "restart"), Tick(0, "READY", (401, 402)))


def test_the_events_of_a_recovery_in_every_order() -> None:
    """A run advancing from step 100 to 500 in 400 s, then the events of a recovery in each of all 5,040 orders,
    30 s apart: whatever the order, the buckets add up to the 610 s and no share leaves [0, 1]."""
    start = [Tick(0, "READY"), Tick(1, "READY", (100,)), Tick(401, "READY", (500,))]
    for order in itertools.permutations(range(len(RECOVERY))):
        segments: list[Segment] = []
        tally = replay(start, segments=segments)
        for i, index in enumerate(order):
            seen = RECOVERY[index]
            tally = observe(tally, type(seen)(**{**seen.__dict__, "ts": 430.0 + 30 * i}), segments)
            check(tally, segments)
        assert tally.wall_s == pytest.approx(610.0), order


def test_a_preemption_and_its_recovery_as_the_issue_saw_it() -> None:
    """Issue 30: 15 s paid, 18 s advancing (120%), and 30 s lost where the wall clock said 52 s from the
    preemption to the first step after it. Now the poll that first sees PREEMPTED and the relaunch's interval are
    counted, once each: from the last poll before the preemption to the first step after, every second is badput."""
    progress = Progress()
    progress.tick(0, "READY")
    progress.steps_seen([1, 2, 3], 5)
    progress.steps_seen([10, 20], 15)
    progress.tick(20, "PREEMPTED")  # the poll that first sees it
    progress.event("preemption", {"step_before": 20}, 25)
    progress.event("recovery", {"phase": "provisioning"}, 30)
    progress.event("recovery", {"phase": "setup"}, 50)
    progress.event("restart", {}, 60)
    closed = progress.steps_seen([11, 12], 72)  # resumed from the checkpoint at step 10
    assert closed == {"step_before": 20, "first_step_after": 11, "steps_lost": 10, "seconds_to_recover": 52.0}
    tally = progress.goodput
    check(tally)
    assert tally.seconds["recovery"] + tally.seconds["provisioning"] + tally.seconds["setup"] + \
        tally.seconds["first_step"] - 5 == pytest.approx(72 - 15)  # from the last good poll to the step after
    assert tally.seconds["lost"] == pytest.approx(10 * 10 / 19)  # 10 of the 19 steps the attempt made, at its pace
    assert tally.advancing_s <= tally.paid_s and tally.paid_s == pytest.approx(15 + 22)
    assert (tally.recoveries, tally.steps_lost, tally.step) == (1, 10, 12)


def test_a_hang_moves_its_quiet_time_from_advancing_to_hang() -> None:
    progress = Progress()
    progress.tick(0, "READY")
    progress.steps_seen([1, 2], 10)
    progress.tick(960, "READY")  # no new step: still counted as advancing until the watchdog says otherwise
    progress.event("hang", {}, 950)  # the watchdog's suspicion: nothing changes yet
    progress.event("hang", {"step_before": 2, "lost_for": 900.0}, 960)
    progress.event("restart", {}, 1000)  # the same TPU: restarted only, still paid
    progress.steps_seen([2, 3], 1030)
    tally = progress.goodput
    check(tally)
    assert tally.seconds["hang"] == pytest.approx(900) and tally.seconds["recovery"] == pytest.approx(40)
    assert tally.paid_s == pytest.approx(1030) and tally.advancing_s == pytest.approx(50 - tally.seconds["lost"])
    assert "15m hung" in tally.line() and "runtime goodput" in tally.line()


def test_a_watch_that_starts_on_a_dead_tpu_counts_recovery_not_paid() -> None:
    tally = replay([Tick(0, "PREEMPTED"), Mark(30, "watch"), Tick(60, None, (5,))])
    check(tally)
    assert tally.seconds["recovery"] == 60 and tally.paid_s == 0 and tally.phase == "recovery"


def test_nothing_is_counted_after_the_end_and_a_new_watch_starts_again() -> None:
    tally = replay([Tick(0, "READY"), Tick(10, "READY", (1,)), Mark(70, "ended"), Tick(500, "READY", (9,))])
    assert tally.wall_s == 70 and tally.phase == "over"
    again = observe(tally, Mark(600, "watch"))
    assert again.wall_s == 0 and again.started == 600


def test_an_old_guards_heartbeat_still_adds_up() -> None:
    """A heartbeat written before the buckets ({paid_s, advancing_s, lost_s}, advancing above paid)."""
    beat = Heartbeat.from_json({"ts": 1.0, "holder": "guard@x", "role": "guard",
                                "goodput": {"paid_s": 15.0, "advancing_s": 18.0, "lost_s": 30.0}})
    check(replace_started(beat.goodput))
    assert beat.goodput.runtime == 1.0 and beat.goodput.paid_s == 15.0


def replace_started(tally: Goodput) -> Goodput:
    from dataclasses import replace

    return replace(tally, started=0.0, last=tally.wall_s)
