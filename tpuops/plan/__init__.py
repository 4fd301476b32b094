"""Pure planning: (spec, observed resources) -> ordered actions, warnings and an hourly estimate.

`tpuops plan` prints this with nothing observed; `up` observes first and executes the same plan, which
is what makes `up` idempotent and printable. No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from tpuops import catalog
from tpuops.cloud.base import DEAD_QUEUED_STATES, DEAD_TPU_STATES
from tpuops.cloud.compute_tpu import policy_name, template_name
from tpuops.errors import ForeignResourceError
from tpuops.plan.guard_vm import GuardPlan, guard_plan
from tpuops.spec import CLUSTER_LABEL, Spec
from tpuops.spec.pools import PoolSpec

# compute_tpu: a TPU made by Compute Engine (tpu.api: compute), one instance or policy + template + group.
Kind = Literal["bucket", "iam", "tpu", "queued_resource", "compute_tpu", "client_vm", "guard_vm"]
Verb = Literal["create", "keep", "recreate"]
IAM_ROLE = "roles/storage.objectAdmin"


@dataclass(frozen=True)
class ObservedResource:
    kind: Kind
    name: str
    state: str | None = None
    owned: bool = True  # carries tpuops-cluster=<name>
    zone: str | None = None


@dataclass(frozen=True)
class Action:
    verb: Verb
    kind: Kind
    name: str
    zone: str | None
    summary: str
    reason: str = ""


@dataclass(frozen=True)
class PoolPlan:
    """One of the spec's pools: where a TPU would run, what it costs, which bucket it reads (and, planned
    --live, whether the quota covers it)."""

    type: str
    zone: str
    region: str
    provisioning: str
    runtime: str | None
    reservation: str | None
    price_per_hour: float | None  # list price (tpu.api: compute: by machine type); None where the catalog has
    # none, 0 on the simulator
    bucket: str | None
    quota: str | None = None  # "covered: ..." / "NOT covered: ..." (plan --live)
    move: str | None = None  # what moving the run here from the first pool costs in inter-region transfer


@dataclass(frozen=True)
class Plan:
    cluster: str
    project: str | None
    zone: str | None
    region: str | None
    actions: tuple[Action, ...]
    warnings: tuple[str, ...]
    cost_per_hour: float
    cost_note: str
    autostop: str = "off"  # what `up` installs on worker 0: "idle 30m, max 12h" | "off"
    guard: GuardPlan | None = None  # the guard the spec enables (guard.enabled)
    pools: tuple[PoolPlan, ...] = ()  # every pool in order (the single form: one)

    @property
    def changes(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.verb != "keep")

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def tpu_name(spec: Spec) -> str:
    return spec.name


def node_names(spec: Spec) -> tuple[str, ...]:
    """The TPU's node, or with Multislice one per slice, NAME-0..NAME-(N-1): Google names them from the prefix."""
    if spec.tpu.multislice:
        return tuple(f"{tpu_name(spec)}-{index}" for index in range(spec.tpu.slices))
    return (tpu_name(spec),)


def queued_resource_name(spec: Spec) -> str:
    return f"{spec.name}-qr"


def client_vm_name(spec: Spec) -> str:
    return f"{spec.name}-client"


def tpu_kind(spec: Spec) -> Kind:
    """The TPU is created directly, through a queued resource, or by Compute Engine."""
    if tpu_api_of(spec) == "compute":
        return "compute_tpu"
    return "queued_resource" if spec.tpu.through_queue else "tpu"


def bucket_reader(spec: Spec, node_account: str | None, default_account: Callable[[], str]) -> str | None:
    """Who reads and writes the bucket: a legacy Node reads GCS as its own account (the Cloud TPU service agent,
    known once the Node exists); a TPU VM as tpu.service_account, else the project's Compute default account."""
    if spec.tpu.mode == "node":
        return node_account
    return spec.tpu.service_account or default_account()


def make_plan(spec: Spec, observed: Sequence[ObservedResource] = (), project: str | None = None) -> Plan:
    seen = {resource.kind: resource for resource in observed}
    for resource in observed:
        if not resource.owned:
            raise ForeignResourceError(
                f"{resource.kind} '{resource.name}' exists but does not carry the label {CLUSTER_LABEL}={spec.name}",
                "tpuops never touches resources it did not create: choose another name in the spec",
            )
    # None for a type the catalog does not know (rules.py warned: `up` asks the zone).
    accelerator = catalog.load().accelerator(spec.tpu.type, listed_only=False)
    wanted = _wanted(spec, accelerator)
    actions = tuple(_decide(kind, name, zone, summary, seen.get(kind)) for kind, name, zone, summary in wanted)
    cost, note = _cost(spec, accelerator)
    return Plan(
        cluster=spec.name,
        project=project or spec.project,
        zone=spec.zone,
        region=spec.region,
        actions=actions,
        warnings=tuple(_warnings(spec, accelerator)),
        cost_per_hour=round(cost, 4),
        cost_note=note,
        autostop=spec.autostop.describe(),
        guard=guard_plan(spec),
        pools=tuple(pool_plans(spec)),
    )


def pool_plans(spec: Spec) -> list[PoolPlan]:
    cat = catalog.load()
    framework = spec.trainer.framework if spec.trainer else None
    plans = []
    for pool in spec.pools():
        accelerator = cat.accelerator(pool.type, listed_only=False)
        runtime = pool.runtime or (cat.default_runtime(accelerator, spec.tpu.mode, framework) if accelerator else None)
        price = _pool_price(spec, pool, accelerator)
        plans.append(PoolPlan(pool.type, pool.zone, pool.region, pool.provisioning, runtime, pool.reservation, price,
                              spec.bucket_for(pool.region)))
    return plans


def _pool_price(spec: Spec, pool: PoolSpec, accelerator: catalog.Accelerator | None) -> float | None:
    """The pool's list price per hour as the API that makes its TPU bills it: Compute Engine by machine type, the
    TPU API by accelerator type and slices; None where the catalog has none, 0 on the simulator."""
    if accelerator is None:
        return None
    if spec.provider == "local":
        return 0.0
    spot = pool.provisioning != "on-demand"
    if (spec.tpu.api or catalog.load().default_api(pool.type)) == "compute":
        price = catalog.load().compute_price(pool.type, spot=spot)
    else:
        known = accelerator.known_price_per_hour(spot=spot)
        price = None if known is None else known * spec.tpu.slices
    return None if price is None else round(price, 4)


def _wanted(spec: Spec, accelerator: catalog.Accelerator | None) -> list[tuple[Kind, str, str | None, str]]:
    wanted: list[tuple[Kind, str, str | None, str]] = []
    if spec.bucket:
        if spec.provider == "local":
            summary = f"a local directory standing for gs://{spec.bucket.name}"
        else:
            summary = f"location {spec.bucket.location or spec.region}, uniform bucket-level access"
        wanted.append(("bucket", spec.bucket.name, None, summary))
        if spec.provider == "gcp":
            wanted.append(("iam", spec.bucket.name, None, f"{IAM_ROLE} on this bucket only for {_member_text(spec)}"))
    tpu_summary = _tpu_summary(spec, accelerator)
    if tpu_api_of(spec) == "compute":
        wanted += _compute_wanted(spec)
    elif spec.tpu.through_queue:
        summary = _slices_summary(spec, accelerator, tpu_summary) if spec.tpu.multislice else \
            f"node {tpu_name(spec)}: {tpu_summary}"
        wanted.append(("queued_resource", queued_resource_name(spec), spec.zone, summary))
    else:
        wanted.append(("tpu", tpu_name(spec), spec.zone, tpu_summary))
    if spec.client_vm:
        vm = spec.client_vm
        wanted.append(("client_vm", client_vm_name(spec), spec.zone,
                       f"{vm.machine_type}, {vm.disk_gb} GB disk, {vm.image_family}"))
    return wanted


def tpu_api_of(spec: Spec) -> catalog.TpuApiName:
    """The API that makes the TPU: the spec's tpu.api, else compute for generations only Compute Engine serves."""
    return spec.tpu.api or catalog.load().default_api(spec.tpu.type)


def provisioning_of(spec: Spec) -> str:
    """Compute Engine's provisioning model as the spec asks for it."""
    tpu = spec.tpu
    if tpu.flex_start:
        return f"flex-start for at most {tpu.flex_start}"
    if tpu.reservation:
        return f"reservation-bound to {tpu.reservation}"
    return "spot" if tpu.spot else "standard (on-demand)"


def _compute_wanted(spec: Spec) -> list[tuple[Kind, str, str | None, str]]:
    """One kind, compute_tpu: one host is an instance; several are a regional workload policy, a global instance
    template and a zonal group, made (and deleted) together, since a slice is whole or made again whole."""
    shape = catalog.load().compute_shape(spec.tpu.type)
    if shape is None:  # rules.py refused it already for `up`; plan shows what it can
        return [("compute_tpu", tpu_name(spec), spec.zone, f"{spec.tpu.type}: no Compute Engine shape known")]
    vm = (f"{shape.machine_type} ({shape.chips_per_host} chips), image {shape.image_project}/{shape.image_family}, "
          f"{shape.boot_disk_type} {shape.boot_disk_gb} GB, {provisioning_of(spec)}, onHostMaintenance TERMINATE")
    if not shape.multi_host:
        return [("compute_tpu", tpu_name(spec), spec.zone, f"Compute Engine TPU VM {shape.accelerator_type}: {vm}")]
    name = tpu_name(spec)
    return [("compute_tpu", name, spec.zone,
             f"slice {shape.accelerator_type}: {shape.hosts} hosts of {shape.machine_type}, "
             f"{shape.hosts * shape.chips_per_host} chips, all at once (BULK), no repair of single VMs; "
             f"workload policy {policy_name(name)} in {spec.region} (HIGH_THROUGHPUT, accelerator topology "
             f"{shape.topology}), instance template {template_name(name)} ({vm}), instance group {name}")]


def _decide(kind: Kind, name: str, zone: str | None, summary: str, seen: ObservedResource | None) -> Action:
    if seen is None:
        return Action("create", kind, name, zone, summary)
    dead = DEAD_QUEUED_STATES if kind == "queued_resource" else \
        DEAD_TPU_STATES if kind in ("tpu", "compute_tpu") else frozenset()
    if seen.state in dead:
        return Action("recreate", kind, name, seen.zone or zone, summary,
                      reason=f"{seen.state}: it holds quota until deleted")
    return Action("keep", kind, name, seen.zone or zone, summary, reason=f"exists ({seen.state or 'ok'})")


def _member_text(spec: Spec) -> str:
    return bucket_reader(  # type: ignore[return-value]
        spec, "the Cloud TPU service agent (service-PROJECT_NUMBER@cloud-tpu.iam.gserviceaccount.com)",
        lambda: "the project's Compute default service account (PROJECT_NUMBER-compute@developer.gserviceaccount.com)",
    )


def _tpu_summary(spec: Spec, accelerator: catalog.Accelerator | None) -> str:
    tpu = spec.tpu
    if spec.provider == "local" and accelerator is not None:
        workers = tpu.workers or accelerator.hosts
        return f"{accelerator.type} simulated by {workers} local worker{'s' * (workers != 1)}"
    framework = spec.trainer.framework if spec.trainer else None
    runtime = tpu.runtime or (catalog.load().default_runtime(accelerator, tpu.mode, framework) if accelerator else None)
    scheduling = "spot" if tpu.spot else "preemptible" if tpu.preemptible else "on-demand"
    if accelerator is None:
        kind = "legacy TPU Node" if tpu.mode == "node" else "TPU VM"
        return f"{kind} {tpu.type} (not in the catalog: hosts and chips unknown), runtime {runtime}, {scheduling}"
    kind = "legacy TPU Node" if tpu.mode == "node" else "TPU VM" if accelerator.hosts == 1 else "pod slice"
    return (f"{kind} {accelerator.type}: {accelerator.hosts} host{'s' * (accelerator.hosts != 1)}, "
            f"{accelerator.chips} chips, {accelerator.cores} TensorCores, runtime {runtime}, {scheduling}")


def _slices_summary(spec: Spec, accelerator: catalog.Accelerator | None, tpu_summary: str) -> str:
    names = node_names(spec)
    slices = len(names)
    total = (f"; {slices * accelerator.hosts} hosts, {slices * accelerator.chips} chips in all"
             if accelerator else "")
    return f"Multislice: {slices} slices, nodes {names[0]}..{names[-1]}, each a {tpu_summary}{total}"


def _compute_cost(spec: Spec, accelerator: catalog.Accelerator | None) -> tuple[float, str]:
    cat = catalog.load()
    shape = cat.compute_shape(spec.tpu.type)
    machines = f"{shape.hosts} x {shape.machine_type}" if shape else spec.tpu.type
    as_of = cat.compute.as_of if cat.compute else cat.as_of
    if spec.tpu.reservation:
        return 0.0, f"{machines}: billed through reservation {spec.tpu.reservation}"
    price = cat.compute_price(spec.tpu.type, spot=spec.tpu.spot)
    if price is None:
        return 0.0, f"no list price known for {machines} (catalog as of {as_of})"
    note = f"list price as of {as_of}: {machines} ${price:.2f}/h"
    if spec.tpu.flex_start:
        note += " (on-demand; flex-start is billed at its own, lower rate)"
    return price, note


def _cost(spec: Spec, accelerator: catalog.Accelerator | None) -> tuple[float, str]:
    if spec.provider == "local":
        return 0.0, "local simulator: free"
    if tpu_api_of(spec) == "compute":
        return _compute_cost(spec, accelerator)
    cat = catalog.load()
    slices = spec.tpu.slices
    tpu = accelerator.price_per_hour(spot=spec.tpu.spot or spec.tpu.preemptible) * slices if accelerator else 0.0
    vm = 0.0
    if spec.client_vm:
        vm = cat.machine_prices.get(spec.client_vm.machine_type, 0.0)
        vm += spec.client_vm.disk_gb * cat.disk_price_per_gb_month / 730
    unknown_vm = spec.client_vm is not None and spec.client_vm.machine_type not in cat.machine_prices
    each = f" ({slices} slices)" if slices > 1 else ""
    note = f"list price as of {cat.as_of}: TPU ${tpu:.2f}/h{each}" if accelerator else f"no price for {spec.tpu.type}"
    note += f" + client VM ${vm:.2f}/h" if spec.client_vm else ""
    note += ", client VM machine type not in the catalog" if unknown_vm else ""
    note += "; TPU Research Cloud quota is free"
    return tpu + vm, note


def _warnings(spec: Spec, accelerator: catalog.Accelerator | None) -> list[str]:
    warnings: list[str] = []
    if spec.bucket and spec.bucket.location and spec.region and spec.bucket.location.lower() != spec.region:
        warnings.append(
            f"bucket location {spec.bucket.location} is not the TPU's region {spec.region}: every read crosses "
            "regions (egress cost per GB, slower input); drop bucket.location to keep them together"
        )
    runtime = spec.tpu.runtime or ""
    framework = spec.trainer.framework if spec.trainer else None
    if "-tf-" in runtime and framework in ("pytorch", "jax"):
        warnings.append(f"runtime {runtime} is a TensorFlow image but the trainer is {framework}")
    if accelerator and accelerator.multi_host and "-tf-" in runtime and "-pod" not in runtime:
        warnings.append(f"{accelerator.type} spans {accelerator.hosts} hosts: use the -pod runtime variant")
    if spec.provider == "gcp" and spec.logs.tensorboard and not spec.logs.tensorboard.startswith("gs://"):
        warnings.append("logs.tensorboard is not on gs://: `tpuops logs` cannot read it from here")
    return warnings
