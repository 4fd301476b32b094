"""`tpuops up`: observe what exists, plan (the same plan `tpuops plan` prints), then create or adopt.

Each resource kind's handler (`cloud/kinds`) observes and ensures its resource; here they are scheduled by what
each depends on, in parallel where nothing does (the bucket and its grant, the TPU or queued resource, the
client VM). The state file is saved before every create, so an interrupted `up` leaves nothing that `up`
(resumes) or `down` (deletes) cannot find.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from graphlib import TopologicalSorter
from pathlib import Path

from tpuops import keys
from tpuops.access import ssh_config
from tpuops.access.cluster import ClusterAccess, access_for
from tpuops.access.workers import number_hosts
from tpuops.autostop.remote import AgentInstall
from tpuops.cloud.kinds import HANDLERS, handler
from tpuops.cloud.kinds.base import Found, Job, Knobs, Ledger, Progress, silent
from tpuops.cloud.kinds.tpu import reachable_hosts
from tpuops.cloud.queued import QueuedLeftBehind, withdraw_queued
from tpuops.context import Context
from tpuops.ops import autostop as cost_guard
from tpuops.ops import guard as guard_commands
from tpuops.ops.offerings import verify_spec_zones
from tpuops.ops.placement import PoolOrder, place
from tpuops.ops.specs import load_checked
from tpuops.plan import Action, Kind, Plan, make_plan, tpu_kind
from tpuops.providers.guard_host import GuardHostInfo
from tpuops.spec import CLUSTER_LABEL, Spec
from tpuops.spec.autostop import AutostopSpec
from tpuops.state import ClusterState, WorkerRecord
from tpuops.state.autostop import kept_setting


@dataclass(frozen=True)
class UpResult:
    cluster: str
    plan: Plan
    done: tuple[Action, ...]  # the creates and recreates carried out
    workers: tuple[WorkerRecord, ...]
    known_hosts: str | None
    offer_warnings: tuple[str, ...] = ()  # zones that could not be asked what they offer
    autostop: AgentInstall | None = None  # the cost guard on worker 0 (None: autostop is off)
    guard: GuardHostInfo | None = None  # `up --guard` / spec guard.enabled: the guard started or adopted
    autostop_kept: str | None = None  # a setting of an earlier --autostop kept in place of the spec's
    access: ClusterAccess | None = field(default=None, compare=False)  # what up holds, for the next workflow
    skipped_pools: tuple[str, ...] = ()  # with several pools: one line per pool passed over, and why

    @property
    def warnings(self) -> tuple[str, ...]:
        return (*self.plan.warnings, *self.offer_warnings)

    @property
    def created_nothing(self) -> bool:
        return not self.done

    def as_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "created": [asdict(a) for a in self.done],
            "kept": [asdict(a) for a in self.plan.actions if a.verb == "keep"],
            "workers": [w.model_dump() for w in self.workers],
            "known_hosts": self.known_hosts,
            "warnings": list(self.warnings),
            "autostop": asdict(self.autostop) if self.autostop else None,
            "guard": asdict(self.guard) if self.guard else None,
            "autostop_kept": self.autostop_kept,
            "pool": self.access.state.pool if self.access else None,
            "skipped_pools": list(self.skipped_pools),
        }


def up(
    ctx: Context, spec_path: str | Path, wait_for_capacity: float = 0.0, progress: Progress | None = None,
    autostop: AutostopSpec | None = None, guard: bool | None = None, order: PoolOrder | None = None,
    spec: Spec | None = None,
) -> UpResult:
    """`autostop` (--autostop) replaces the spec's setting for this cluster until changed again. `guard`
    (--guard; None: the spec's guard.enabled) starts or adopts the guard once everything is up. With several
    pools the TPU is placed first (ops/placement.py; `order`: recovery's), the rest follows its region.
    `spec`: the file at `spec_path` as `load_checked` read it, where the caller holds it already (recovery)."""
    spec = spec if spec is not None else load_checked(spec_path)
    provider = ctx.provider_for(spec)
    start_guard = spec.guard.enabled if guard is None else guard
    if start_guard:
        provider.guard_host()  # before anything is created: a provider without a guard says so now
    cloud = provider.cloud()
    path = str(Path(spec_path).resolve())
    state = ctx.store.load(spec.name) or ClusterState(
        name=spec.name, provider=spec.provider, project=provider.project, zone=spec.zone, spec_path=path
    )
    state.spec_path = path
    job = Job(spec, cloud, Ledger(ctx.store, state), Knobs.from_env(ctx.env, wait_for_capacity), progress or silent)
    key = keys.ensure_key_pair(ctx.store.cluster_dir(spec.name), spec.name)
    user = keys.ssh_user(spec.ssh.user)
    job = replace(job, ssh_keys=keys.ssh_keys_metadata(user, key))
    job.ledger.update(lambda state: setattr(state, "ssh_user", user))
    skipped: tuple[str, ...] = ()
    placed: tuple[Action, ...] = ()
    if len(spec.pools()) > 1:
        placement = place(job, provider.project, order)
        spec, skipped = placement.spec, placement.skipped
        placed = (placement.created,) if placement.created else ()
        job = replace(job, spec=spec)

    known = observe(job, [action.kind for action in make_plan(spec).actions])
    plan = make_plan(spec, [found.resource for found in known.values() if found.resource], provider.project)
    if autostop is not None:
        given = cost_guard.with_idle(cost_guard.setting_of(job.ledger.state, spec), autostop)
        job.ledger.update(lambda state: setattr(state, "autostop", given))
    kept = kept_setting(job.ledger.state, spec) if autostop is None else None
    if kept is not None:
        job.progress("autostop", spec.name, kept)
    offer_warnings = ask_the_zones(job, plan)
    for action in plan.actions:
        job.progress(action.kind, action.name, "planned: " + action.verb)
    try:
        known = ensure_all(job, plan, known)
    except KeyboardInterrupt:
        raise interrupted(job) from None
    workers, known_hosts = record_workers(ctx, job, known[tpu_kind(spec)])
    ssh_config.refresh(ctx.store.home, job.ledger.state)  # `ssh tpuops-NAME-w0` reaches the workers just recorded
    # Handed on as held: the state just written and the spec parsed above, not read again by name.
    access = access_for(ctx, job.ledger.state, spec)
    agent = cost_guard.install(ctx, access)
    guard_info = guard_commands.start_guard(ctx, job.ledger.state, spec) if start_guard else None
    return UpResult(spec.name, plan, (*placed, *plan.changes), workers, known_hosts, offer_warnings, agent, guard_info,
                    autostop_kept=kept, access=access, skipped_pools=skipped)


def ask_the_zones(job: Job, plan: Plan) -> tuple[str, ...]:
    """Before anything is created: when the TPU must be created, each zone it may be created in is asked
    whether it offers the spec's type and runtime (SpecError if not: nothing is created). The catalog only
    advised; warnings when a zone could not be asked."""
    creates_tpu = any(a.kind == tpu_kind(job.spec) and a.verb in ("create", "recreate") for a in plan.actions)
    return tuple(verify_spec_zones(job.cloud, job.spec)) if creates_tpu else ()


class UpInterrupted(KeyboardInterrupt):
    """Ctrl-C during `up`: the queued resource that was withdrawn (it was still waiting for capacity), or
    what could not be withdrawn. Everything else stays recorded, for `up` to resume or `down` to delete."""

    def __init__(self, cluster: str, withdrawn: str | None = None, left_behind: str | None = None) -> None:
        super().__init__(cluster, withdrawn, left_behind)
        self.cluster = cluster
        self.withdrawn = withdrawn
        self.left_behind = left_behind


def interrupted(job: Job) -> UpInterrupted:
    """A queued resource still waiting when Ctrl-C came would be granted later to nobody: withdraw it."""
    name = job.spec.name
    record = job.ledger.recorded("queued_resource")
    if record is None or record.status != "creating" or not record.zone:
        return UpInterrupted(name)
    try:
        withdrawn = withdraw_queued(job.cloud.queued, record.zone, record.name, cluster=name,
                                    owned_if={CLUSTER_LABEL: name}, only_waiting=True)
    except QueuedLeftBehind as err:
        return UpInterrupted(name, left_behind=str(err))
    if not withdrawn:
        return UpInterrupted(name)
    job.ledger.update(lambda state: state.drop_resource("queued_resource"))
    return UpInterrupted(name, withdrawn=f"queued resource {record.name} in {record.zone}")


def observe(job: Job, kinds: list[Kind]) -> dict[Kind, Found]:
    """Each wanted kind as it is now, one after the other in the order their observations need."""
    known: dict[Kind, Found] = {}
    for kind in HANDLERS:
        if kind in kinds:
            known[kind] = handler(kind).observe(job, known)
    return known


def ensure_all(job: Job, plan: Plan, known: dict[Kind, Found]) -> dict[Kind, Found]:
    """Every action of the plan, each as soon as what it depends on is done. All finish (and record their
    state) before the first error is raised; what depends on a failed action does not start."""
    actions = {action.kind: action for action in plan.actions}
    graph = TopologicalSorter({kind: [d for d in handler(kind).depends_on(job.spec) if d in actions]
                               for kind in actions})
    graph.prepare()
    known = dict(known)
    running: dict[Future[Found], Kind] = {}
    errors: dict[Kind, BaseException] = {}
    # Not a `with` block: on Ctrl-C the caller must get control back at once (state is already saved).
    pool = ThreadPoolExecutor(max_workers=max(len(actions), 1), thread_name_prefix="up")
    try:
        while True:
            for kind in graph.get_ready():
                running[pool.submit(handler(kind).ensure, job, actions[kind], dict(known))] = kind
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                kind = running.pop(future)
                error = future.exception()
                if error is not None:
                    errors[kind] = error
                else:
                    known[kind] = future.result()
                    graph.done(kind)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for kind in actions:  # in the plan's order
        if kind in errors:
            raise errors[kind]
    return known


def record_workers(ctx: Context, job: Job, tpu: Found) -> tuple[tuple[WorkerRecord, ...], str | None]:
    """Workers tpuops connects to (the TPU VM hosts of every slice, or a legacy Node's client VM) and their
    pinned host keys. With Multislice `index` counts across slices, slice by slice."""
    spec = job.spec
    multislice = len(tpu.nodes) > 1
    port = spec.ssh.port
    reachable = [reachable_hosts(job.cloud, spec, node) for node in tpu.nodes]
    workers = number_hosts([hosts for hosts, _ in reachable], port, "client_vm" if spec.tpu.mode == "node" else "tpu")
    records = iter(workers)  # in the order of the hosts they were made from
    pinned: list[keys.PinnedKey] = []
    for hosts, host_keys in reachable:
        by_host = {w.index: next(records) for w in hosts}
        pinned += [keys.PinnedKey(by_host[k.worker].ssh_host, port, k.key_type, k.key)
                   for k in host_keys if k.worker in by_host]
    known_hosts = str(keys.pin_host_keys(ctx.store.cluster_dir(spec.name), pinned)) if pinned else None
    zone = tpu.nodes[0].zone

    def write(state: ClusterState) -> None:
        state.workers = list(workers)
        state.zone = zone
        in_slices = f" in {len(tpu.nodes)} slices" if multislice else ""
        state.log("up", f"{len(workers)} worker(s){in_slices} ready in {zone}")

    job.ledger.update(write)
    return tuple(workers), known_hosts
