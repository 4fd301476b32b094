"""`up` across pools: which of the spec's pools (`tpu.pools`) the TPU is created in.

Before anything else `up` creates, the TPU (or queued resource) is placed: a pool the project's quota does not
cover is skipped in one line (the quota is asked once; when it cannot be read every pool is tried), the others are
tried in order, and a capacity or quota error moves to the next pool at once. With --wait-for-capacity the pools
are tried round after round until the wait runs out. A queued resource is asked for in one pool at a time (each
gets its share of the wait, and is withdrawn before the next pool is asked), so a cluster never holds two granted
TPUs. The rest of `up` (bucket, IAM, workers) then works from the spec as that pool sees it (`Spec.in_pool`).

Recovery (`watch`, the guard) asks for an order: its own pool only, or the other pools first (`PoolOrder`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tpuops.cloud.base import DEAD_QUEUED_STATES, DEAD_TPU_STATES
from tpuops.cloud.kinds import handler, tpu_handler
from tpuops.cloud.kinds.base import MISSING, Doomed, Job
from tpuops.errors import CapacityError, QuotaError, SpecError, TpuopsError, UsageError
from tpuops.ops.offerings import verify_spec_zones
from tpuops.ops.pool_health import PLACED_EVENT, by_health, history, placed_line
from tpuops.plan import Action, queued_resource_name, tpu_kind, tpu_name
from tpuops.spec import Spec
from tpuops.spec.pools import PoolSpec
from tpuops.state import ClusterState

Sleep = Callable[[float], None]


@dataclass(frozen=True)
class PoolOrder:
    """What recovery asks of `up`: stay in pool `current` (`stay`), or try the others first and it last."""

    current: str  # a pool's label
    stay: bool


@dataclass(frozen=True)
class Placement:
    pool: PoolSpec
    spec: Spec  # the spec as the pool sees it
    skipped: tuple[str, ...] = ()  # one line per pool skipped, saying why
    created: Action | None = None  # the TPU or queued resource created in the pool (None: one kept)


def moves_on(err: TpuopsError) -> bool:
    """An error that another pool may not have: no capacity, or a quota the zone's request ran into."""
    return isinstance(err, CapacityError | QuotaError)


def ordered(pools: Sequence[PoolSpec], order: PoolOrder | None) -> list[PoolSpec]:
    if order is None:
        return list(pools)
    labels = [pool.label for pool in pools]
    if order.current not in labels:
        return list(pools)
    at = labels.index(order.current)
    if order.stay:
        return [pools[at]]
    return [*pools[at + 1:], *pools[:at], pools[at]]


def place(job: Job, project: str | None, order: PoolOrder | None = None, sleep: Sleep = time.sleep) -> Placement:
    """The pool the cluster's TPU is in, or is created in now (the TPU or queued resource created there)."""
    spec = job.spec
    kept = kept_pool(job)
    if kept is not None:
        return Placement(kept, spec.in_pool(kept))
    preferred = by_health(spec.pools(), history(job.ledger.store)) if spec.tpu.order == "health" else spec.pools()
    pools, skipped = with_quota(job, ordered(preferred, order), project, recovering=order is not None)
    started = time.monotonic()
    job.progress("pools", spec.name, f"trying {len(pools)} pool(s) in order: "
                 + ", ".join(pool.label for pool in pools))
    deadline = time.monotonic() + job.knobs.wait_for_capacity
    backoff = max(job.knobs.capacity_backoff, 0.01)
    failures: list[str] = []
    while True:
        for index, pool in enumerate(pools):
            share = (deadline - time.monotonic()) / (len(pools) - index)
            try:
                placed = create_in_pool(job, pool, max(share, 0.0), started)
            except TpuopsError as err:
                if not (moves_on(err) or isinstance(err, SpecError)):
                    raise
                why = f"{pool.label}: {err.message}"
                failures.append(why)
                job.progress("pools", spec.name, f"skipped {why}" + ("; trying the next pool"
                                                                       if index + 1 < len(pools) else ""))
                continue
            return replace(placed, skipped=(*skipped, *failures))
        left = deadline - time.monotonic()
        if left <= 0:
            raise CapacityError(f"no pool could create {spec.name}'s TPU ({'; '.join(failures[-len(pools):])})",
                                "rerun with --wait-for-capacity 2h to keep trying every pool, or add pools "
                                "(`tpuops quota` shows where the project has quota)")
        job.progress("pools", spec.name, f"no pool had room; trying them again in {backoff:.0f}s")
        sleep(min(backoff, left))
        backoff = min(backoff * 2, 600.0)


def with_quota(job: Job, pools: list[PoolSpec], project: str | None,
               recovering: bool = False) -> tuple[list[PoolSpec], tuple[str, ...]]:
    """The pools the quota covers (all of them when it cannot be read), and one line per pool left out."""
    from tpuops.ops.quota import quota_of

    try:
        report = quota_of(job.cloud, project or "local")
    except TpuopsError as err:
        job.progress("pools", job.spec.name, f"quota not readable ({err.message}): trying every pool")
        return pools, ()
    covered, skipped = [], []
    for pool in pools:
        coverage = report.pool_coverage(pool.type, pool.zone, pool.provisioning, pool.reservation,
                                        job.spec.tpu.slices)
        if coverage.covered:
            covered.append(pool)
            continue
        skipped.append(f"{pool.label}: no quota ({coverage.why})")
        job.progress("pools", job.spec.name, f"skipped {skipped[-1]}")
    if not covered:  # `up` refuses; recovery (`order`) tries again later, as after a capacity error
        refusal = UsageError if not recovering else CapacityError
        raise refusal(f"no pool of {job.spec.name} has quota for its TPU: {'; '.join(skipped)}",
                      "`tpuops quota` shows where the project has quota; nothing was created")
    return covered, tuple(skipped)


def create_in_pool(job: Job, pool: PoolSpec, share: float, started: float) -> Placement:
    """Create the TPU in one pool (its zone asked first whether it offers the type), by its kind's own create
    (which first clears what an earlier TPU of the cluster left, where its kind leaves anything). A queued
    resource waits at most `share` there (withdrawn after); a TPU made directly is tried once."""
    spec = job.spec.in_pool(pool)
    verify_spec_zones(job.cloud, spec)
    kind = tpu_kind(spec)
    wait = share if kind == "queued_resource" and job.knobs.wait_for_capacity > 0 else 0.0
    in_pool = replace(job, spec=spec, knobs=replace(job.knobs, wait_for_capacity=wait))
    action = Action("create", kind, _name(spec), pool.zone, f"{kind} in pool {pool.label}")
    job.progress(kind, action.name, f"pool {pool.label}")
    tpu_handler(kind).create(in_pool, action)
    took = time.monotonic() - started

    def record(state: ClusterState) -> None:
        state.pool = pool.label
        state.log(PLACED_EVENT, placed_line(pool.label, took), pool=pool.label, seconds=round(took, 1))  # pool health

    job.ledger.update(record)
    return Placement(pool, spec, created=action)


def _name(spec: Spec) -> str:
    return queued_resource_name(spec) if spec.tpu.through_queue else tpu_name(spec)


def kept_pool(job: Job) -> PoolSpec | None:
    """The pool of a TPU (or queued resource) the cluster already has and the spec still wants, alive or not
    (`up` then keeps or re-creates it there as with one pool). One in a pool the spec no longer names is deleted
    with force: nothing granted is left to bill outside the spec. The record of one that is gone is kept for the
    create that follows, as with one pool: what it names may have left parts (a Compute Engine slice's template
    and policy) which that create deletes first."""
    spec = job.spec
    kind = tpu_kind(spec)
    record = job.ledger.recorded(kind)
    if record is None or not record.zone:
        return None
    pool = next((p for p in spec.pools() if p.label == job.ledger.state.pool), None) or spec.pool_at(record.zone)
    seen = handler(kind).describe(job.cloud, record, spec.tpu.mode)
    exists = seen.node is not None or seen.queued_state not in (None, MISSING)
    wanted = pool is not None and pool.zone == record.zone
    if seen.node is not None:  # CREATING counts: `up` waits for it
        alive = seen.node.state not in DEAD_TPU_STATES and seen.queued_state not in DEAD_QUEUED_STATES
    else:  # a queued resource still waiting for capacity is the cluster's place in the queue
        alive = seen.queued_state not in (None, MISSING, *DEAD_QUEUED_STATES)
    if wanted and alive:
        return pool
    if exists:  # dead (it holds quota until deleted), or in a pool the spec no longer names
        why = "dead" if wanted else "in a pool the spec no longer names"
        job.progress(kind, record.name, f"{why} in {record.zone}: deleting it (force)")
        handler(kind).delete(job.cloud, spec.tpu.mode, Doomed(kind, record.name, record.zone))
        job.ledger.forget_workers()
        job.ledger.update(lambda state: state.drop_resource(kind))
    return None
