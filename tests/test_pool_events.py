"""The pool facts of `placed` and `preempted` events (which pool, how long it took) are the events' fields: pool
health (`tpuops quota`, `tpu.order: health`) and churn (recovery's move) read those, never the message. A state
written before the fields had them in the message only; loading it reads them out of the text, in one place."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tpuops.ops.pool_health import PLACED_EVENT, PREEMPTED_EVENT, pool_health
from tpuops.ops.pool_move import preemptions_in
from tpuops.state import MOVED_EVENT, ClusterState, StateStore

NOW = datetime(2026, 11, 27, 12, tzinfo=timezone.utc)
WEST, EAST = "v6e-8 spot in europe-west4-a", "v5litepod-8 spot in us-central1-a"


def at(hours_ago: float) -> str:
    return (NOW - timedelta(hours=hours_ago)).isoformat()


def test_the_readers_count_the_fields_whatever_the_message_says(tmp_path: Path) -> None:
    """Messages are for people: reworded (or naming another pool), the facts are still the fields."""
    state = ClusterState(name="a", provider="gcp", spec_path="x")
    state.log(PLACED_EVENT, "TPU placed", pool=WEST, seconds=42.0)
    for _ in range(3):
        state.log(PREEMPTED_EVENT, f"TPU PREEMPTED (it was in pool {EAST} once)", pool=WEST)
    state.log(MOVED_EVENT, f"from pool {WEST} to pool {EAST}: churning", pool=EAST)
    for event in state.events:
        event.at = at(1)
    store = StateStore(tmp_path)
    store.save(state)
    saved = json.loads(store.path("a").read_text())["events"]
    assert [(e["pool"], e["seconds"]) for e in saved] == [(WEST, 42.0), *[(WEST, None)] * 3, (EAST, None)]
    loaded = store.load("a")
    assert loaded is not None
    health = {h.pool: h for h in pool_health([loaded], NOW.timestamp())}
    assert set(health) == {WEST}  # the moved event counts as neither a placement nor a preemption
    assert (health[WEST].preemptions, health[WEST].capacity_seconds, health[WEST].placements) == (3, 42.0, 1)
    assert (preemptions_in(loaded, WEST, NOW.timestamp()), preemptions_in(loaded, EAST, NOW.timestamp())) == (3, 0)


def test_a_state_written_before_the_fields_still_counts_its_events(tmp_path: Path) -> None:
    """A state.json as tpuops wrote it before: the facts only in the text ("in pool LABEL after Ns", "<why> in
    pool LABEL"). Loading it gives the events their fields; the next save writes them."""
    old = {
        "name": "old", "provider": "gcp", "spec_path": "x", "pool": WEST,
        "events": [
            {"at": at(48), "kind": "placed", "message": f"in pool {WEST} after 30.0s", "by": None},
            *({"at": at(h), "kind": "preempted", "message": f"TPU PREEMPTED in pool {WEST}", "by": "the guard"}
              for h in (5, 3, 2)),
            {"at": at(1), "kind": "placed", "message": f"in pool {EAST} after 600.0s", "by": None},
            {"at": at(1), "kind": "recovery", "message": f"leaving pool {WEST}: churning", "by": "the guard"},
        ],
    }
    store = StateStore(tmp_path)
    store.path("old").parent.mkdir(parents=True)
    store.path("old").write_text(json.dumps(old))
    loaded = store.load("old")
    assert loaded is not None
    assert [(e.kind, e.pool, e.seconds) for e in loaded.events] == [
        ("placed", WEST, 30.0), *[("preempted", WEST, None)] * 3, ("placed", EAST, 600.0), ("recovery", None, None)]
    health = {h.pool: h for h in pool_health([loaded], NOW.timestamp())}
    assert (health[WEST].preemptions, health[WEST].capacity_seconds) == (3, 30.0)
    assert (health[EAST].preemptions, health[EAST].capacity_seconds) == (0, 600.0)
    assert preemptions_in(loaded, WEST, NOW.timestamp()) == 3  # churn: 3 within 6 hours
    store.save(loaded)
    rewritten = json.loads(store.path("old").read_text())["events"]
    assert [e["pool"] for e in rewritten] == [WEST, WEST, WEST, WEST, EAST, None]
