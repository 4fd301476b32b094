"""The guard's workflows over a Context: `guard up`, `guard down` (also the first thing `tpuops down` does),
`guard status` (read by `report.py`), `guard logs`, and `simulate preempt`, the rehearsal of a preemption."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from tpuops import keys
from tpuops.access.cluster import ClusterAccess, resolve_name, spec_of
from tpuops.access.guard_place import guard_store, guard_url
from tpuops.access.guard_state import with_guard_state
from tpuops.cloud.blob_types import BlobStore
from tpuops.context import Context
from tpuops.errors import TpuopsError, UsageError
from tpuops.guard.bundle import remove_bundle, stage_bundle
from tpuops.guard.lease import Lease, read_lease
from tpuops.guard.ledger import Ledger, LedgerEvent
from tpuops.guard.report import GuardReport, guard_report, host_of
from tpuops.ops import launch as launch_ops
from tpuops.providers.base import Login
from tpuops.providers.guard_host import BUNDLE, GuardHost, GuardHostInfo, GuardPlacement
from tpuops.remote.base import LineHandler
from tpuops.spec import CLUSTER_LABEL, Spec
from tpuops.state import ClusterState, VmRecord, bucket_of

FOLLOW_INTERVAL_S = 2.0


def placement_for(state: ClusterState, spec: Spec | None, zone: str | None = None,
                  machine_type: str | None = None, login: Login | None = None) -> GuardPlacement:
    """Where the guard runs: the options, else the spec's `guard:` section, else beside the TPU."""
    bucket = (spec.home_bucket if spec is not None else None) or bucket_of(state, spec)
    if bucket is None:
        raise UsageError(f"the guard keeps its lease and ledger in the run's bucket, and '{state.name}' has none",
                         "add `bucket: {name: ...}` to the spec and run `tpuops up SPEC` again")
    guard = spec.guard if spec is not None else None
    labels = {**(spec.labels if spec is not None else {}), CLUSTER_LABEL: state.name}
    return GuardPlacement(
        cluster=state.name, project=state.project, zone=zone or (guard.zone if guard else None) or state.zone,
        machine_type=machine_type or (guard.machine_type if guard else "e2-micro"),
        service_account=guard.service_account if guard else None, bucket=bucket, labels=labels,
        # A guard VM joins the TPU's network, must reach the workers' SSH port, and gets the cluster's key.
        network=spec.tpu.network if spec is not None else "default",
        subnetwork=spec.tpu.subnetwork if spec is not None else None,
        ssh_port=state.workers[0].ssh_port if state.workers else (spec.ssh.port if spec is not None else 22),
        login=login, notify=guard.notify if guard else None)


def cluster_login(ctx: Context, state: ClusterState, spec: Spec | None) -> Login:
    """The cluster's SSH identity as `up` left it (what a guard VM is given over SSH)."""
    cluster_dir = ctx.store.cluster_dir(state.name)
    user = state.login_user(spec.ssh.user if spec is not None else None)
    return Login(user, cluster_dir / keys.PRIVATE_KEY, cluster_dir / keys.KNOWN_HOSTS)


def guard_up(ctx: Context, name: str | None, zone: str | None = None,
             machine_type: str | None = None) -> GuardHostInfo:
    """Start the guard, or adopt the one running and refresh it (idempotent)."""
    state = ctx.store.require(resolve_name(ctx, name))
    spec = spec_of(state)
    # What a running guard changed comes back first: staging the laptop's older copy would undo its recovery.
    return start_guard(ctx, with_guard_state(ctx, state, spec), spec, zone, machine_type)


def start_guard(ctx: Context, state: ClusterState, spec: Spec | None, zone: str | None = None,
                machine_type: str | None = None) -> GuardHostInfo:
    """`guard up` for a caller that holds the cluster's state and spec (`up --guard`): the guard's VM is
    recorded in that state, which is saved."""
    placement = placement_for(state, spec, zone, machine_type, cluster_login(ctx, state, spec))
    provider = ctx.provider_for(spec, state)
    host = provider.guard_host()
    host.check(placement)  # before anything is written
    prefix = guard_url(placement.bucket, state.name)
    info = _ensure_with_bundle(ctx, state, spec, host, placement, provider.blob_store(f"{prefix}/{BUNDLE}"), prefix)
    state.log("guard", f"guard up: {info.kind} {info.name} ({info.state})")
    if info.kind == "vm":  # a resource like the others: `status` describes it, `down` searches its zone
        state.set_resource(VmRecord(kind="guard_vm", name=info.name, zone=info.zone, status="created"))
    ctx.store.save(state)
    return info


def _ensure_with_bundle(ctx: Context, state: ClusterState, spec: Spec | None, host: GuardHost,
                        placement: GuardPlacement, bundle: BlobStore, prefix: str) -> GuardHostInfo:
    """A guard VM runs from copies: staged first, since it starts as soon as they are there. A first `guard up`
    that then fails takes its staged copies away again (nothing half-done); a running guard's stay."""
    home = host.bundle_home()
    if home is None:
        return host.ensure(placement, prefix)
    first = host.describe(state.name) is None
    stage_bundle(ctx, state, spec, bundle, home)
    try:
        return host.ensure(placement, prefix)
    except BaseException:
        if first:
            with contextlib.suppress(TpuopsError):
                remove_bundle(bundle)
        raise


def launch_handed_to_guard(ctx: Context, name: str | None, options: launch_ops.LaunchOptions, *,
                           on_line: LineHandler | None = None,
                           on_step: launch_ops.StepHandler | None = None,
                           on_push: launch_ops.ProgressHandler | None = None,
                           access: ClusterAccess | None = None) -> launch_ops.LaunchReport:
    """`tpuops launch` (and run's launch, with the access `up` holds): the run started, then handed to the
    cluster's guard VM if it has one. A recoverer's relaunch calls launch_run itself: the run is then its own."""
    report = launch_ops.launch_run(ctx, name, options, on_line=on_line, on_step=on_step, on_push=on_push,
                                   access=access)
    if not report.ok:
        return report
    return replace(report, guard_trouble=hand_run_to_guard(ctx, report.cluster, access.state if access else None))


def hand_run_to_guard(ctx: Context, cluster: str, held: ClusterState | None = None) -> str | None:
    """After a launch: a guard VM reads its own copy of the state, so it is handed the new run (the bundle staged
    again, the VM refreshed; `guard up` again, in the zone the VM is in). None when that went well or there is no
    guard VM; else what went wrong and what to do (the run itself is started either way). `held`: the state the
    caller holds (the launch changed its runs, not its guard VM)."""
    state = held if held is not None else ctx.store.load(cluster)
    record = state.resource("guard_vm") if state is not None else None
    if record is None:
        return None
    again = f"`tpuops guard up {cluster}` hands it the run"
    try:
        info = guard_up(ctx, cluster, zone=record.zone)
    except TpuopsError as err:
        return f"the guard VM was not given the new run ({err.message}); {again}"
    if info.detail is not None and "not refreshed" in info.detail:
        return f"the guard VM was {info.detail.split('; ', 1)[-1]}; {again}"
    return None


def guard_down(ctx: Context, name: str) -> bool:
    """`tpuops guard down NAME`."""
    state = ctx.store.load(name)
    return stop_guard(ctx, state, spec_of(state)) if state is not None else False


def stop_guard(ctx: Context, state: ClusterState, spec: Spec | None) -> bool:
    """Stop and remove the guard; its lease is freed at once (else a laptop watch would wait 3 polls)."""
    host = host_of(ctx.provider_for(spec, state))
    stopped = host.delete(state.name) if host is not None else False
    if state.resource("guard_vm") is not None:
        state.drop_resource("guard_vm")
        ctx.store.save(state)
    store = guard_store(ctx, state, spec)
    if store is not None:
        with contextlib.suppress(TpuopsError):  # the bucket unreachable: the lease goes stale by itself
            record, generation = read_lease(store)
            if record is not None and record.holder is not None and record.role == "guard":
                Lease(store, record.holder, record.role, record.poll_interval, generation=generation).release()
            if stopped:
                Ledger(store, "tpuops guard down").append("guard-down", "the guard was stopped (`guard down`)")
    return stopped


def report_of(ctx: Context, name: str | None) -> tuple[str, GuardReport | None]:
    """`tpuops guard status NAME`: the cluster's name as resolved, and its guard's report."""
    state = ctx.store.require(resolve_name(ctx, name))
    return state.name, guard_report(ctx, state, spec_of(state))


def guard_events(ctx: Context, name: str | None, follow: bool, interval: float = FOLLOW_INTERVAL_S,
                 sleep: Callable[[float], None] = time.sleep) -> Iterator[LedgerEvent]:
    """The guard's events from the ledger, oldest first; with `follow`, then new ones as they come."""
    state = ctx.store.require(resolve_name(ctx, name))
    store = guard_store(ctx, state, spec_of(state))
    if store is None:
        raise UsageError(f"'{state.name}' has no bucket, so no guard ledger", "the guard needs the run's bucket")
    ledger = Ledger(store)
    seen = ""
    while True:
        for blob, event in ledger.events(after=seen):
            seen = blob
            yield event
        if not follow:
            return
        sleep(interval)


def simulate_preempt(ctx: Context, name: str | None, slice_index: int = 0) -> str:
    """Preempt the cluster's TPU (one slice of it) as Google would: the rehearsal before paying for one."""
    state = ctx.store.require(resolve_name(ctx, name))
    tpu = state.tpu_record()
    if tpu is None or tpu.status != "created":
        raise UsageError(f"'{state.name}' has no TPU to preempt", f"run `tpuops up` for '{state.name}' first")
    nodes = tpu.node_names
    if not 0 <= slice_index < len(nodes):
        raise UsageError(f"--slice {slice_index}: '{state.name}' has {len(nodes)} slice(s)",
                         f"give 0..{len(nodes) - 1}")
    provider = ctx.provider_for(spec_of(state), state)
    provider.preempt(nodes[slice_index], compute=tpu.kind == "compute_tpu")
    state.log("simulate", f"preempted {nodes[slice_index]} (tpuops simulate preempt)")
    ctx.store.save(state)
    return nodes[slice_index]


def simulate_stockout(ctx: Context, zone: str, seconds: float) -> float:
    """A simulated zone refuses to create TPUs for `seconds` (0: it has capacity again): how you rehearse a run
    moving to its next pool. Returns the seconds set."""
    if seconds < 0:
        raise UsageError(f"--for {seconds:g}s: a stockout cannot last less than nothing", "give --for 10m, or 0")
    ctx.local_provider().stock_out(zone, seconds)
    return seconds
