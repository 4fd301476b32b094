"""A laptop's `tpuops watch` (or `run --watch`) while a guard holds the lease: it prints the guard's events from
the ledger as they come and never deletes or creates anything. It returns when the guard ends the run (or gives
up), or None when the guard's lease went stale or free (the caller may then take it over)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

from tpuops.errors import TpuopsError
from tpuops.guard.lease import LeaseRecord
from tpuops.guard.ledger import Ledger, LedgerEvent
from tpuops.ops.watch import WatchResult

CONTEXT_EVENTS = 5  # shown first, so the viewer knows where the guard is
FINAL_KINDS = frozenset({"ended", "gave-up"})


def view_guard(ledger: Ledger, current_lease: Callable[[], LeaseRecord | None], cluster: str, interval: float,
               say: Callable[[str, str], None], sleep: Callable[[float], None]) -> WatchResult | None:
    record = current_lease()
    holder = f"{record.role} {record.holder}" if record is not None else "another holder"
    say("viewer", f"{holder} holds the lease and recovers '{cluster}': showing its events; this watch deletes "
                  "and creates nothing (Ctrl-C stops viewing)")
    seen = ""
    try:
        earlier = ledger.events()
    except TpuopsError as err:
        say("viewer", f"could not read the ledger: {err.message}")
        earlier = []
    for _, event in earlier[-CONTEXT_EVENTS:]:
        show(event, say)
    if earlier:
        seen = earlier[-1][0]
    while True:
        sleep(interval)
        try:
            new = ledger.events(after=seen)
        except TpuopsError as err:
            say("viewer", f"could not read the ledger: {err.message}")
            new = []
        for name, event in new:
            seen = name
            show(event, say)
            if event.kind in FINAL_KINDS:
                code = int(event.data.get("exit_code", 1 if event.kind == "gave-up" else 0))
                return WatchResult(cluster, event.data.get("run_id"), code, f"{holder}: {event.message}", 0)
        try:
            record = current_lease()
        except TpuopsError:
            continue  # cannot tell: keep viewing rather than risk a second recoverer
        if record is None or not record.live(time.time()):
            return None


def show(event: LedgerEvent, say: Callable[[str, str], None]) -> None:
    at = datetime.fromtimestamp(event.ts, timezone.utc).strftime("%H:%M:%S")
    say(event.kind, f"[{at} {event.holder}] {event.message}")
