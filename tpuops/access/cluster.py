"""A cluster as every workflow and feature reaches it: its name resolved, its state (with what its guard VM
changed) and spec loaded once into a `ClusterAccess`, its runners, its TPU's paths, its logdir.

A workflow that already holds the state and the spec (`up`, `status`, `down`, `run` after `up`) builds the
access with `access_for` and hands it on; only a command that starts from a name calls `cluster_access`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuops import catalog
from tpuops.access.guard_state import with_guard_state
from tpuops.access.workers import ssh_targets, worker_targets
from tpuops.context import Context
from tpuops.errors import SpecError, TpuopsError, UsageError
from tpuops.providers.base import Login, Provider
from tpuops.remote.base import Runner
from tpuops.spec import Spec, load_spec
from tpuops.state import TPU_KINDS, ClusterState, WorkerRecord, epoch_seconds
from tpuops.state.autostop import deletion_record

KEY_FILE = "id_ed25519"
KNOWN_HOSTS_FILE = "known_hosts"
DEFAULT_CONNECT_TIMEOUT = 60.0
# A worker whose VM has been up this long has had time to start sshd: if it refuses connections, say so
# after REFUSED_TIMEOUT instead of retrying for the whole connect timeout (meant for workers just booted).
SETTLED_AFTER_SECONDS = 300.0
REFUSED_TIMEOUT = 5.0


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one cluster's workers, as `up` left it."""

    state: ClusterState
    spec: Spec | None
    workers: tuple[WorkerRecord, ...]  # the SSH targets (all TPU workers, or the client VM of a legacy Node)
    user: str
    key_path: Path
    known_hosts_path: Path
    provider: Provider

    @property
    def login(self) -> Login:
        return Login(self.user, self.key_path, self.known_hosts_path)


def resolve_name(ctx: Context, name: str | None, otherwise: str | None = None) -> str:
    """The cluster a command is about: the one given, else the only one there is. `otherwise` names the
    command's way to do without a cluster, for the hints."""
    if name:
        return name
    names = ctx.store.names()
    if len(names) == 1:
        return names[0]
    alternative = f", or {otherwise}" if otherwise else ""
    if not names:
        raise UsageError("no clusters here", f"create one with `tpuops up SPEC`{alternative}")
    raise UsageError(f"several clusters here ({', '.join(names)})", f"name the one you mean{alternative}")


def cluster_access(ctx: Context, name: str | None, *, need_spec: bool = False) -> ClusterAccess:
    """A command's way in, from the cluster's name: its state and spec read here (the state with what the
    cluster's guard VM changed, such as the workers of a TPU it re-created)."""
    state = ctx.store.require(resolve_name(ctx, name))
    spec = _load_spec(state, required=need_spec)
    return access_for(ctx, with_guard_state(ctx, state, spec), spec)


def access_for(ctx: Context, state: ClusterState, spec: Spec | None) -> ClusterAccess:
    """The way in for a caller that already holds the state and the spec (`up`, `status`, `down`): nothing is
    read again."""
    targets = ssh_targets(state)
    if not targets:
        raise UsageError(
            f"cluster '{state.name}' has no workers recorded", "run `tpuops up SPEC` (or `tpuops status`) first"
        )
    user = state.login_user(spec.ssh.user if spec else None)
    cluster_dir = ctx.store.cluster_dir(state.name)
    return ClusterAccess(state, spec, tuple(targets), user, cluster_dir / KEY_FILE, cluster_dir / KNOWN_HOSTS_FILE,
                         ctx.provider_for(spec, state))


def _refuse_if_autostopped(access: ClusterAccess) -> None:
    """Before connecting (a minute of SSH timeouts otherwise): the autostop agent's record that it deleted the TPU,
    one read of the bucket when autostop is on. The record is written before the delete is asked for, so it is
    trusted only when the TPU API agrees that the TPU is gone (a refused delete leaves a TPU that still bills)."""
    try:
        record = deletion_record(access.provider, access.state, access.spec)
        if record is None or not _tpu_is_gone(access):
            return
    except TpuopsError:
        return  # the bucket or the API unreadable: the connection will tell
    raise TpuopsError(f"the TPU of '{access.state.name}' is gone: {record.line(confirmed=True)}",
                      f"`tpuops up {access.state.spec_path}` brings it back (the bucket and its data stayed)")


def _tpu_is_gone(access: ClusterAccess) -> bool:
    tpu = access.state.tpu_record()
    if tpu is None or not tpu.zone:
        return False
    cloud = access.provider.cloud()
    if tpu.kind == "compute_tpu":
        return cloud.compute_tpus is None or cloud.compute_tpus.get_tpu_vm(tpu.zone, tpu.name) is None
    node = cloud.tpu_api(tpu.mode or "vm").get_node(tpu.zone, tpu.node_name)
    return node is None


def _load_spec(state: ClusterState, required: bool) -> Spec | None:
    try:
        return placed(load_spec(state.spec_path), state)
    except SpecError:
        if required:
            raise
        return None  # exec and ssh only need the state; a moved spec must not stop them


def make_runners(access: ClusterAccess, workers: Sequence[WorkerRecord], *,
                 connect_timeout: float | None = None,
                 on_new_host_key: Callable[[str, str], None] | None = None) -> list[Runner]:
    """One runner per worker, as the cluster's provider reaches them.

    connect_timeout None: up to a minute for workers that may still be booting, and a few seconds for a
    refusing worker of a cluster that has been up a while; a number: that long, whatever the refusal.
    """
    _refuse_if_autostopped(access)
    refused_timeout = None
    if connect_timeout is None:
        connect_timeout = DEFAULT_CONNECT_TIMEOUT
        up_for = seconds_up(access.state)
        if up_for is not None and up_for >= SETTLED_AFTER_SECONDS:
            refused_timeout = REFUSED_TIMEOUT
    return access.provider.runners(worker_targets(workers), access.login, connect_timeout=connect_timeout,
                                   refused_timeout=refused_timeout, on_new_host_key=on_new_host_key)


def tpu_paths(access: ClusterAccess, spec: Spec) -> tuple[str, str]:
    """The device files the TPU runtime holds open for this generation, and libtpu's lock file."""
    accelerator = catalog.load().accelerator(spec.tpu.type)
    vfio = accelerator is not None and accelerator.generation.name in ("v5litepod", "v5p", "v6e")
    return access.provider.tpu_paths(vfio)


def seconds_up(state: ClusterState) -> float | None:
    """How long ago `up` last saw the SSH targets' machine ready (the TPU, or a legacy Node's client VM);
    None when it never recorded that."""
    kinds = ("client_vm",) if any(w.role == "client_vm" for w in state.workers) else TPU_KINDS
    times = [epoch_seconds(r.updated_at) for r in state.resources if r.kind in kinds and r.status == "created"]
    if not times or None in times:
        return None
    return time.time() - max(t for t in times if t is not None)


def spec_of(state: ClusterState) -> Spec | None:
    """The spec the cluster was made from, if its file is still there and valid (else state alone is used)."""
    try:
        spec = load_spec(Path(state.spec_path)) if state.spec_path else None
    except TpuopsError:
        return None
    return placed(spec, state) if spec is not None else None


def placed(spec: Spec, state: ClusterState) -> Spec:
    """With several pools: the spec as the pool the cluster's TPU is in sees it (its type, zone, region's bucket
    and checkpoints); the spec as it is while no pool holds it."""
    if len(spec.pools()) < 2:
        return spec
    pool = next((p for p in spec.pools() if p.label == state.pool), None) or spec.pool_at(state.zone)
    return spec.in_pool(pool) if pool is not None else spec


def resolve_logdir(ctx: Context, name: str | None, logdir: str | None) -> str:
    if logdir:
        return logdir
    return held_logdir(ctx.store.require(resolve_name(ctx, name,
                                                     otherwise="pass --logdir gs://BUCKET/PATH or a directory")))


def held_logdir(state: ClusterState) -> str:
    """The logdir of a state the caller holds, by the spec file it names (as its pool sees it)."""
    return logdir_of(state, placed(load_spec(state.spec_path), state))


def logdir_of(state: ClusterState, spec: Spec) -> str:
    """The cluster's TensorBoard logdir as its spec names it (a relative path is the spec file's neighbour)."""
    location = spec.logs.tensorboard
    if not location:
        raise UsageError(
            f"the spec of cluster '{state.name}' ({state.spec_path}) sets no logs.tensorboard",
            "add `logs: {tensorboard: gs://BUCKET/PATH}` to the spec, or pass --logdir",
        )
    if "://" not in location and not Path(location).expanduser().is_absolute():
        location = str(Path(state.spec_path).parent / location)
    return location
