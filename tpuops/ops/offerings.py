"""The zone's TPU API decides: before anything is created, ask the zone whether it offers the spec's type and
runtime. The bundled catalog only advises (rules.py warns about what it does not list); nothing is cached.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tpuops import catalog, rules
from tpuops.cloud.base import Cloud, ZoneOffer
from tpuops.errors import CloudError, SpecError, UsageError
from tpuops.plan import tpu_api_of
from tpuops.spec import Spec

if TYPE_CHECKING:
    from tpuops.context import Context

SUGGESTIONS = 3


def verify_zone_offers(cloud: Cloud, spec: Spec, zone: str) -> list[str]:
    """Raise SpecError (one line, naming the closest few the zone offers) when `zone` does not offer the spec's
    accelerator type or runtime; return warnings when the zone could not be asked (403, failure after the
    retries): then the create call will tell. Call it for every zone before creating anything in it."""
    if tpu_api_of(spec) == "compute":  # the TPU API does not know Compute Engine's machine types; Compute Engine's
        return []                        # refusal of the create (allowlist, quota, zone) is one line that says which
    api = cloud.tpu_api(spec.tpu.mode)
    what = "TPU Node types and versions" if spec.tpu.mode == "node" else "TPU types and runtimes"
    try:
        offer = api.zone_offer(zone)
    except CloudError as err:  # 403, or still failing after the retries (TransientError)
        return [f"could not ask zone {zone} for its {what} ({err}); going on: the create call will tell"]
    if offer is None:
        raise SpecError(f"the TPU API does not know zone {zone}",
                        "check the zone name (`tpuops catalog` lists the zones the catalog knows)")
    _require(spec.tpu.type, offer.accelerator_types, f"zone {zone} does not offer accelerator type", offer)
    runtime = rules.requested_runtime(spec)
    if runtime and not offer.any_runtime:
        noun = "legacy TPU Node version" if spec.tpu.mode == "node" else "runtime"
        _require(runtime, offer.runtimes, f"zone {zone} does not offer {noun}", offer)
    return []


def verify_spec_zones(cloud: Cloud, spec: Spec) -> list[str]:
    """verify_zone_offers for the spec's zone and each fallback zone in `tpu.zones` (what `plan --live` checks)."""
    zones = [spec.zone, *spec.tpu.zones] if spec.zone else list(spec.tpu.zones)
    return [warning for zone in dict.fromkeys(zones) for warning in verify_zone_offers(cloud, spec, zone)]


def _require(name: str, offered: Sequence[str], message: str, offer: ZoneOffer) -> None:
    if name in offered:
        return
    if not offered:
        raise SpecError(f"{message} {name}: it lists none", "choose another zone (`tpuops catalog --live --zone Z`)")
    raise SpecError(f"{message} {name}", f"closest it offers: {', '.join(closest(name, offered))}; "
                    f"`tpuops catalog --live --zone {offer.zone}` lists all")


def closest(name: str, offered: Sequence[str], n: int = SUGGESTIONS) -> list[str]:
    """The few offered names nearest `name`: same generation first for types, then by spelling."""
    generation = re.split(r"-\d", name, maxsplit=1)[0]
    same_family = [item for item in offered if item.startswith(generation + "-")]
    pool = same_family or list(offered)
    close = difflib.get_close_matches(name, pool, n=n, cutoff=0.0)
    return close or list(pool)[:n]


# ------------------------------------------------------------------------------------- tpuops catalog


@dataclass(frozen=True)
class TypeOffer:
    type: str
    hosts: int | None  # None: a type the catalog does not know
    chips: int | None
    price_on_demand: float | None  # USD per hour, the catalog's list price
    price_spot: float | None
    node: bool  # also offered as a legacy TPU Node
    zones: tuple[str, ...] = ()  # the catalog's zones for it (listing without a zone)


@dataclass(frozen=True)
class MachineOffer:
    """A Compute Engine TPU machine type (tpu.api: compute) with its list price where one is known."""

    machine_type: str
    generation: str
    chips: int  # on one VM
    price_on_demand: float | None  # USD per hour
    price_spot: float | None
    default_api: str  # what the generation's TPUs use unless tpu.api says otherwise


@dataclass(frozen=True)
class Offerings:
    """What a zone offers (or every zone, without one), according to `source`."""

    source: str
    zone: str | None
    types: tuple[TypeOffer, ...]
    runtimes: tuple[str, ...]
    node_versions: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    machines: tuple[MachineOffer, ...] = ()  # Compute Engine TPU machine types (bundled catalog only)
    machines_as_of: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def list_offerings(ctx: Context, zone: str | None, live: bool = False, project: str | None = None) -> Offerings:
    """`tpuops catalog`: the catalog's view of a zone (or of all), or with `live` the zone's TPU API's."""
    if zone is not None and not rules.ZONE_RE.match(zone):
        raise UsageError(f"'{zone}' is not a zone name", "zones look like europe-west4-a")
    if live:
        if zone is None:
            raise UsageError("--live asks one zone's TPU API", "pass --zone, e.g. --zone europe-west4-a")
        return _live_offerings(ctx.gcp_cloud(project or ctx.require_project(None)), zone)
    return _catalog_offerings(zone)


def _catalog_offerings(zone: str | None) -> Offerings:
    cat = catalog.load()
    generations = [g for g in cat.generations.values() if zone is None or zone in g.zones]
    types = tuple(_type_offer(t, node=g.node_supported, zones=() if zone else g.zones)
                  for g in generations for t in g.types())
    warnings = ()
    if zone is not None and not generations:
        warnings = (f"the catalog lists no TPUs in zone {zone}; `tpuops catalog --live --zone {zone}` asks the zone",)
    return Offerings(
        source=f"bundled catalog as of {cat.as_of}",
        zone=zone,
        types=types,
        runtimes=tuple(dict.fromkeys(r for g in generations for r in g.vm_runtimes)),
        node_versions=tuple(dict.fromkeys(r for g in generations for r in g.node_runtimes)),
        warnings=warnings,
        machines=_machine_offers({g.name for g in generations}),
        machines_as_of=cat.compute.as_of if cat.compute else None,
    )


def _machine_offers(generations: set[str]) -> tuple[MachineOffer, ...]:
    """Compute Engine's TPU machine types of these generations, each at its list price (Catalog.machine_type_price)."""
    cat = catalog.load()
    if cat.compute is None:
        return ()
    offers = []
    for machine, (name, chips) in cat.compute.machine_types().items():
        if name not in generations or name not in cat.generations:
            continue
        on_demand, spot = cat.machine_type_price(machine, spot=False), cat.machine_type_price(machine, spot=True)
        offers.append(MachineOffer(machine, name, chips, None if on_demand is None else round(on_demand, 4),
                                   None if spot is None else round(spot, 4),
                                   cat.compute.generations[name].default_api))
    return tuple(offers)


def _live_offerings(cloud: Cloud, zone: str) -> Offerings:
    vm = cloud.tpus.zone_offer(zone)
    if vm is None:
        raise CloudError(f"the TPU API does not know zone {zone}", "check the zone name")
    node, warnings = None, []
    if cloud.tpu_nodes is not None:
        try:
            node = cloud.tpu_nodes.zone_offer(zone)
        except CloudError as err:
            warnings.append(f"could not list legacy TPU Node types and versions: {err}")
    node_types = set(node.accelerator_types) if node else set()
    names = sorted({*vm.accelerator_types, *node_types}, key=_type_order)
    return Offerings(
        source=f"TPU API of project {cloud.project}, asked now",
        zone=zone,
        types=tuple(_type_offer(name, node=name in node_types) for name in names),
        runtimes=tuple(sorted(vm.runtimes)),
        node_versions=tuple(sorted(node.runtimes)) if node else (),
        warnings=tuple(warnings),
    )


def _type_offer(name: str, node: bool, zones: tuple[str, ...] = ()) -> TypeOffer:
    info = catalog.load().accelerator(name, listed_only=False)
    if info is None:
        return TypeOffer(name, None, None, None, None, node, zones)
    on_demand, spot = info.known_price_per_hour(spot=False), info.known_price_per_hour(spot=True)
    return TypeOffer(name, info.hosts, info.chips, None if on_demand is None else round(on_demand, 4),
                     None if spot is None else round(spot, 4), node, zones)


def _type_order(name: str) -> tuple[int, str, int]:
    """The catalog's generation order, then size; generations it does not know last."""
    order = list(catalog.load().generations)
    generation, _, size = name.rpartition("-")
    rank = order.index(generation) if generation in order else len(order)
    return rank, generation, int(size) if size.isdigit() else 0
