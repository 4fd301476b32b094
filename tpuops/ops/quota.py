"""`tpuops quota`: the project's TPU quota where it is in effect, what its TPUs and queued resources hold of it
now, and so what is free; and whether a pool of the spec is covered (`plan --live`, `init --from-quota`).

The quota service says only what the limits are; use is counted here from the TPU API's listings and the Compute
Engine TPUs tpuops made (every zone), in the unit each quota counts: the number in the accelerator type (v4-32
holds 32 TensorCores, v6e-8 8 chips).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tpuops.catalog import TYPE_RE
from tpuops.cloud.base import Cloud
from tpuops.cloud.compute_tpu import ACCELERATOR_LABEL
from tpuops.cloud.quotas import ANY_LOCATION, QuotaKind, QuotaLimit, quota_kind, quota_kind_of
from tpuops.context import Context
from tpuops.errors import CloudError, UsageError
from tpuops.ops.pool_health import PoolHealth, history, pool_health
from tpuops.spec import region_of

V5E_SERVING_SIZES = (1, 4, 8)  # the v5e types Google's quota page names for its serving quota


@dataclass(frozen=True)
class Holding:
    """What one TPU (or a queued resource's not yet created nodes) holds of the quota."""

    name: str
    generation: str
    kind: QuotaKind
    zone: str
    size: int  # the number in its type: one node's draw
    count: int = 1  # nodes: a Multislice queued resource holds one per slice

    @property
    def units(self) -> int:
        return self.size * self.count


@dataclass(frozen=True)
class QuotaRow:
    limit: QuotaLimit
    used: int | None  # None for a limit that holds in every location not named (each location has its own use)

    @property
    def free(self) -> int | None:
        if self.used is None or self.limit.limit < 0:
            return None
        return self.limit.limit - self.used

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self.limit), "granted": self.limit.granted, "used": self.used, "free": self.free}


@dataclass(frozen=True)
class QuotaReport:
    project: str
    source: str  # "Cloud Quotas API" or "the local simulator's grant"
    limits: tuple[QuotaLimit, ...]
    holdings: tuple[Holding, ...]
    zone: str | None = None  # the rows shown are this zone's and its region's
    health: tuple[PoolHealth, ...] = ()  # pools this machine's clusters of the project used: preemptions, waits

    @property
    def rows(self) -> tuple[QuotaRow, ...]:
        shown = [limit for limit in self.limits if (limit.limit != 0 or self._use(limit, limit.location))
                 and self._in_view(limit)]
        shown.sort(key=lambda limit: (limit.location == ANY_LOCATION, limit.location, limit.generation,
                                      limit.kind, limit.serving, limit.slices))
        return tuple(QuotaRow(limit, None if limit.location == ANY_LOCATION else self._use(limit, limit.location))
                     for limit in shown)

    def _in_view(self, limit: QuotaLimit) -> bool:
        return self.zone is None or limit.location in (self.zone, region_of(self.zone), ANY_LOCATION)

    def _use(self, limit: QuotaLimit, location: str) -> int:
        return sum(held.units for held in self.holdings if draws_on(limit, held, location))

    def as_dict(self) -> dict[str, object]:
        return {"project": self.project, "source": self.source, "zone": self.zone,
                "quota": [row.as_dict() for row in self.rows],
                "held_by": [asdict(held) for held in self.holdings],
                "pool_health": [health.as_dict() for health in self.health]}

    def coverage(self, accelerator_type: str, zone: str, kind: QuotaKind, slices: int = 1) -> Coverage:
        """Whether the quota has room, now, for one more TPU of this type and kind in `zone`."""
        wanted = holding_of("(new)", accelerator_type, kind, zone, slices)
        if wanted is None:
            return Coverage(False, f"{accelerator_type} is no TPU type the quota can be matched to")
        families = [[limit for limit in self.limits if limit.serving == serving and draws_on(limit, wanted, None)]
                    for serving in (False, True)]
        answers = [self._family_coverage(family, wanted, zone) for family in families if family]
        if not answers:
            return Coverage(False, f"no {wanted.generation} {kind} quota in {zone} ({self.source})")
        return next((answer for answer in answers if answer.covered), answers[0])

    def pool_coverage(self, accelerator_type: str, zone: str, provisioning: str, reservation: str | None,
                      slices: int = 1) -> Coverage:
        """A pool's: a reservation holds its own capacity, which the project's quota does not say."""
        if reservation:
            return Coverage(True, f"reservation {reservation} (its own capacity, not the project's quota)")
        return self.coverage(accelerator_type, zone, quota_kind(provisioning), slices)

    def _family_coverage(self, limits: Sequence[QuotaLimit], wanted: Holding, zone: str) -> Coverage:
        binding: list[tuple[QuotaLimit, str]] = []
        for scope, location in (("zone", zone), ("region", region_of(zone))):
            scoped = [limit for limit in limits if limit.scope == scope]
            named = [limit for limit in scoped if limit.location == location]
            binding += [(limit, location) for limit in (named or [lim for lim in scoped
                                                                   if lim.location == ANY_LOCATION])]
        if not binding:
            return Coverage(False, f"no {wanted.generation} {wanted.kind} quota in {zone}")
        for limit, location in binding:
            free = limit.limit - self._use(limit, location)
            if limit.limit >= 0 and free < wanted.units:
                return Coverage(False, f"needs {wanted.units} {limit.unit}, {max(free, 0)} of {limit.limit} free "
                                       f"in {location} ({limit.quota_id})")
        limit, location = binding[0]
        free_text = "unlimited" if limit.limit < 0 else f"{limit.limit - self._use(limit, location)} of {limit.limit}"
        return Coverage(True, f"{free_text} {limit.unit} free in {location}")


@dataclass(frozen=True)
class Coverage:
    covered: bool
    why: str

    def __str__(self) -> str:
        return f"{'covered' if self.covered else 'NOT covered'}: {self.why}"


def project_quota(ctx: Context, project: str | None = None, zone: str | None = None,
                  local: bool = False) -> QuotaReport:
    """The quota of `project` (or, `local`, of the simulator), seen from `zone` when one is given."""
    name = None if local else project or ctx.require_project(None)
    report = quota_of(ctx.local_cloud(), "local", zone) if name is None else quota_of(ctx.gcp_cloud(name), name, zone)
    mine = [state for state in history(ctx.store) if state.project == name]  # the simulator's have no project
    return dataclasses.replace(report, health=tuple(pool_health(mine)))


def quota_of(cloud: Cloud, project: str, zone: str | None = None) -> QuotaReport:
    if cloud.quotas is None:
        raise UsageError("this provider has no quota to show")
    limits = tuple(cloud.quotas.tpu_limits())
    return QuotaReport(project, cloud.quotas.source, limits, tuple(holdings(cloud)), zone)


def holdings(cloud: Cloud) -> list[Holding]:
    """What the project's TPU VMs, queued resources and Compute Engine TPUs hold, in every zone. A queued resource
    counts for the nodes it has not created yet, in any state: people report FAILED and SUSPENDED ones holding
    quota until they are deleted. Legacy TPU Nodes (the v1 API) are not counted."""
    return tpu_api_holdings(cloud) + compute_holdings(cloud)


def tpu_api_holdings(cloud: Cloud) -> list[Holding]:
    nodes = cloud.tpus.find_nodes({})
    held = [h for node in nodes if (h := holding_of(node.name, node.accelerator_type,
                                                   quota_kind_of(node.spot, node.preemptible), node.zone))]
    existing = {(node.zone, node.name) for node in nodes}
    for queued in cloud.queued.find_queued({}):
        names = queued.node_names or ((queued.node_name,) if queued.node_name else (queued.name,))
        missing = [name for name in names if (queued.zone, name) not in existing]
        if missing and queued.accelerator_type:
            found = holding_of(queued.name, queued.accelerator_type, quota_kind_of(queued.spot), queued.zone,
                               len(missing))
            held += [found] if found else []
    return held


def compute_holdings(cloud: Cloud) -> list[Holding]:
    """The TPUs tpuops made as Compute Engine VMs (tpu.api: compute), in every zone, each as the accelerator type
    it was made as (a slice counts whole, in any state: a preempted one holds its chips until deleted). A
    reservation-bound one draws on its reservation, not on the grant."""
    if cloud.compute_tpus is None:
        return []
    held = []
    for found in cloud.compute_tpus.find_tpu_vms({}):
        accelerator_type = found.labels.get(ACCELERATOR_LABEL)
        if accelerator_type is None or found.provisioning == "reservation-bound":
            continue
        holding = holding_of(found.name, accelerator_type, quota_kind_of(found.provisioning == "spot"), found.zone)
        held += [holding] if holding else []
    return held


def holding_of(name: str, accelerator_type: str, kind: QuotaKind, zone: str, count: int = 1) -> Holding | None:
    match = TYPE_RE.match(accelerator_type)
    if match is None:
        return None
    return Holding(name, match["generation"], kind, zone, int(match["size"]), count)


def draws_on(limit: QuotaLimit, held: Holding, location: str | None) -> bool:
    """Whether `held` counts against `limit` (in `location`; None: wherever it is)."""
    if (limit.generation, limit.kind) != (held.generation, held.kind):
        return False
    if limit.slices != "any" and (limit.slices == "pod") != (held.size > 8):
        return False
    if limit.serving and held.size not in V5E_SERVING_SIZES:
        return False
    if location is None:
        return True
    return location == (held.zone if limit.scope == "zone" else region_of(held.zone))


def granted_limits(report: QuotaReport) -> list[QuotaLimit]:
    """Every zone-level limit above Google's default, most units first, one per (generation, zone, kind): the
    pools `init --from-quota` writes. A regional grant names no zone, so it makes no pool of its own."""
    granted = [limit for limit in report.limits if limit.granted and limit.scope == "zone"
               and limit.location != ANY_LOCATION and not limit.serving]
    granted.sort(key=lambda limit: (-limit.limit if limit.limit >= 0 else float("-inf"), limit.location))
    chosen: dict[tuple[str, str, QuotaKind], QuotaLimit] = {}
    for limit in granted:
        chosen.setdefault((limit.generation, limit.location, limit.kind), limit)
    if not chosen:
        raise CloudError(f"project {report.project} has no TPU quota above Google's default in any zone "
                         f"({report.source})", "see `tpuops quota`; TRC grants and approved increases show there")
    return list(chosen.values())

