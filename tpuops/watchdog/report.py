"""`tpuops logs NAME --incidents`: the hangs the watchdog captured, oldest first."""

from __future__ import annotations

from tpuops.access.cluster import resolve_name, spec_of
from tpuops.context import Context
from tpuops.watchdog.records import Incident, incidents, records_store


def list_incidents(ctx: Context, name: str | None) -> list[Incident]:
    state = ctx.store.require(resolve_name(ctx, name))
    return incidents(records_store(ctx, state, spec_of(state)))
