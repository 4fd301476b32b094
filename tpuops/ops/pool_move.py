"""Recovery across pools (`watch` and the guard): when to leave the pool a run was in, and what moves with it.

The same pool first. Recovery moves on when re-creating there has failed for longer than `tpu.move_after`, or at
once when the pool is churning (CHURN_PREEMPTIONS preemptions there within CHURN_WINDOW_S, counted from the
cluster's own events). Before the run resumes in another region its checkpoints (`trainer.checkpoints`) are
copied to that region's bucket server-side; what was copied, and how long it took, goes into the event.

Only a verdict from what the TPU API said starts a recovery (ops/watch.py); nothing here looks at the cloud.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tpuops.context import Context
from tpuops.durations import format_duration
from tpuops.errors import CloudError
from tpuops.ops.placement import PoolOrder
from tpuops.ops.pool_health import PREEMPTED_EVENT
from tpuops.spec import Spec, region_of
from tpuops.state import ClusterState, epoch_seconds

CHURN_PREEMPTIONS = 3
CHURN_WINDOW_S = 6 * 3600.0


@dataclass(frozen=True)
class Move:
    """Recovery's choice: the order `up` tries the pools in, and why it leaves the current one (None: stays)."""

    order: PoolOrder | None
    why: str | None = None


def choose(state: ClusterState, spec: Spec, failing_since: float | None, now: float | None = None) -> Move:
    """`spec` as written (every pool); `failing_since`: when re-creating in the current pool first failed."""
    if len(spec.pools()) < 2 or not state.pool:
        return Move(None)
    now = time.time() if now is None else now
    preemptions = preemptions_in(state, state.pool, now)
    if preemptions >= CHURN_PREEMPTIONS:
        return Move(PoolOrder(state.pool, stay=False),
                    f"the pool is churning ({preemptions} preemptions within "
                    f"{format_duration(CHURN_WINDOW_S)})")
    if failing_since is not None and now - failing_since >= spec.tpu.move_after:
        return Move(PoolOrder(state.pool, stay=False),
                    f"re-creating the TPU there has failed for {format_duration(now - failing_since)} "
                    f"(tpu.move_after {format_duration(spec.tpu.move_after)})")
    return Move(PoolOrder(state.pool, stay=True))


def preemptions_in(state: ClusterState, pool: str, now: float) -> int:
    return sum(1 for event in state.events
               if event.kind == PREEMPTED_EVENT and event.pool == pool
               and now - (epoch_seconds(event.at) or 0.0) <= CHURN_WINDOW_S)


@dataclass(frozen=True)
class CheckpointCopy:
    source: str
    dest: str
    objects: int
    bytes: int
    seconds: float

    def line(self) -> str:
        return (f"checkpoints copied {self.source} -> {self.dest}: {self.objects} object(s), "
                f"{self.bytes} bytes in {self.seconds:.1f}s")


def follow(ctx: Context, before: ClusterState, after: ClusterState, why: str,
           spec: Spec) -> tuple[str, dict[str, object]]:
    """The run moved from `before`'s pool to `after`'s: its checkpoints copied there; the `moved` event's
    message and facts (for the ledger and guard.notify). `spec`: as written (every pool), as recovery holds it."""
    copied = copy_checkpoints(ctx, after, spec, before.zone or "", after.zone or "")
    facts: dict[str, object] = {"from_pool": before.pool, "to_pool": after.pool, "why": why}
    if copied is not None:
        facts |= {"checkpoint_bytes": copied.bytes, "checkpoint_objects": copied.objects,
                  "copy_seconds": round(copied.seconds, 3)}
    return f"from pool {before.pool} to pool {after.pool}: {why}" + (f"; {copied.line()}" if copied else ""), facts


def copy_checkpoints(ctx: Context, state: ClusterState, spec: Spec, from_zone: str,
                     to_zone: str) -> CheckpointCopy | None:
    """The run's checkpoints copied from `from_zone`'s region's bucket to `to_zone`'s (server-side on GCS, a
    directory copy on the simulator); None when the spec names none or both regions share them."""
    source, dest = (spec.checkpoints_for(region_of(zone)) for zone in (from_zone, to_zone))
    if source is None or dest is None or source == dest:
        return None
    provider = ctx.provider_for(spec, state)
    origin, target = provider.blob_store(source), provider.blob_store(dest)
    copy_to = getattr(origin, "copy_to", None)
    if copy_to is None:
        raise CloudError(f"cannot copy the checkpoints at {source}: its store copies nothing")
    started = time.monotonic()
    objects, size = copy_to(target)
    return CheckpointCopy(source, dest, objects, size, time.monotonic() - started)
