"""The cost guard over a Context: the autostop agent installed on worker 0 at the end of `up` (refreshed by
`launch`), `tpuops autostop NAME 30m|off`, the agent stopped before `down`, and what `status` shows (uptime,
cost so far, the agent's setting and time left, the record it left when it deleted the TPU).

The plain-value pieces (configuration, install, the status view, cost) are in `autostop/client.py`; the agent
itself in `tpuops/shipped/autostop_agent.py`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass
from typing import Any

from tpuops.access.cluster import ClusterAccess, access_for, cluster_access, make_runners, tpu_paths
from tpuops.autostop.client import (
    AutostopView,
    CostSoFar,
    agent_config,
    autostop_view,
    change_setting,
    held_cost,
    install_on_worker0,
    stop_for_down,
)
from tpuops.autostop.remote import AgentConfig, AgentInstall, AgentStop, read_agent, stop_agent
from tpuops.context import Context
from tpuops.durations import parse_autostop
from tpuops.errors import TpuopsError, UsageError
from tpuops.remote.base import Runner
from tpuops.spec import Spec
from tpuops.spec.autostop import AutostopSpec
from tpuops.state import ClusterState, TpuRecord, bucket_of, epoch_seconds, record_prefix
from tpuops.state.autostop import AutostopRecord, deletion_record, read_record, setting_of

JAX_CACHE_DIR = "jax-cache"  # under gs://BUCKET/.tpuops/NAME/, as launch points JAX_COMPILATION_CACHE_DIR
AGENT_CONNECT_TIMEOUT = 15.0  # status and down must not wait long for a worker that is gone


def parse_setting(text: str) -> AutostopSpec:
    """`30m`, `2h`, `off` as `--autostop` and `tpuops autostop` take them (UsageError with examples)."""
    return AutostopSpec(idle=parse_autostop(text))


def with_idle(current: AutostopSpec, given: AutostopSpec) -> AutostopSpec:
    """A new idle time keeps the hard cap (max_hours) already set; `off` turns the whole guard off."""
    return AutostopSpec(idle=given.idle, max_hours=current.max_hours) if given.idle is not None else AutostopSpec()


def install(ctx: Context, access: ClusterAccess, worker0_runner: Runner | None = None) -> AgentInstall | None:
    """Install (or refresh) the agent on worker 0 when autostop is on; None when it is off. An earlier
    `autostop off` stays in force (its keep-alive file is left alone). `access` and worker 0's runner are the
    caller's (`up` holds the state and spec it just wrote, `launch` its open connections); a runner is opened
    here only when none is given. Never raises for the worker's sake: `started=False` and an error naming the
    worker come back, and the caller warns."""
    setting = setting_of(access.state, access.spec)
    if not setting.enabled and access.state.autostop is None:
        return None
    config = None
    if setting.enabled:
        try:
            config = config_for(ctx, access, setting)
        except UsageError as err:
            return AgentInstall("w0", False, error=err.message)
    runner = worker0_runner or worker0(access)
    try:
        if config is None:  # `--autostop off`: an agent installed before must not fire
            with contextlib.suppress(TpuopsError):
                stop_agent(runner, access.state.name, keep_alive=True)
            return None
        return install_on_worker0(runner, config, clear_keep_alive=False)
    finally:
        if worker0_runner is None:
            runner.close()


@dataclass(frozen=True)
class AutostopChange:
    """What `tpuops autostop NAME 30m|off` did."""

    cluster: str
    setting: str  # "idle 30m" | "off"
    worker: str
    error: str | None  # the agent could not be started or stopped there

    def as_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "setting": self.setting, "worker": self.worker, "error": self.error}


def set_autostop(ctx: Context, name: str, text: str) -> AutostopChange:
    """`tpuops autostop NAME 30m|off`: (re)start the agent with the new setting, or stop it and leave the
    keep-alive file. The setting is recorded, so launch's refresh keeps it."""
    given = parse_setting(text)  # bad input is told before the cluster is looked up or reached
    access = cluster_access(ctx, name)
    setting = with_idle(setting_of(access.state, access.spec), given)
    config = config_for(ctx, access, setting) if setting.enabled else None
    runner = worker0(access)
    try:
        outcome = change_setting(runner, config, access.state.name)
    finally:
        runner.close()
    ok = outcome.error is None and getattr(outcome, "started", True)
    if ok:
        state = ctx.store.require(access.state.name)
        state.autostop = setting
        state.log("autostop", f"autostop set to {setting.describe()}")
        ctx.store.save(state)
    error = None if ok else outcome.error or "the agent did not start"
    return AutostopChange(access.state.name, setting.describe(), outcome.worker, error)


def stop_before_down(ctx: Context, state: ClusterState, spec: Spec | None) -> AgentStop | None:
    """`down` stops the agent first, so it does not race the deletion; only where one may run."""
    if not state.workers:
        return None
    access = access_for(ctx, state, spec)
    if not setting_of(state, access.spec).enabled:
        return None
    with contextlib.suppress(TpuopsError):
        if deletion_record(access.provider, state, access.spec) is not None:
            return None  # the agent went with the TPU it deleted
    runner = worker0(access, connect_timeout=AGENT_CONNECT_TIMEOUT)
    try:
        return stop_for_down(runner, state.name)
    finally:
        runner.close()


@dataclass(frozen=True)
class GuardStatus:
    """What `status` shows about cost and autostop."""

    cost: CostSoFar | None  # None: the TPU's creation time is unknown
    autostop: AutostopView | None  # None: the agent was not asked (TPU not READY, or autostop off)
    setting: str
    record: AutostopRecord | None  # the agent set out to delete the TPU: why and when
    jax_cache_bytes: int | None = None  # the persistent compilation cache in the bucket (JAX trainers)
    tpu_gone: bool = False  # the TPU API says the TPU no longer exists: only then did the agent's delete happen

    @property
    def record_line(self) -> str | None:
        return self.record.line(confirmed=self.tpu_gone) if self.record is not None else None

    def as_dict(self) -> dict[str, Any]:
        record = asdict(self.record) if self.record else None
        return {"cost": self.cost.as_dict() if self.cost else None,
                "autostop": self.autostop.as_dict() if self.autostop else None, "setting": self.setting,
                "deleted_by_autostop": record if self.tpu_gone else None,
                "autostop_delete_unconfirmed": None if self.tpu_gone else record,
                "jax_cache_bytes": self.jax_cache_bytes}


def guard_status(ctx: Context, state: ClusterState, spec: Spec | None, tpu_state: str | None,
                 accelerator_type: str | None) -> GuardStatus:
    """`tpu_state`: what the TPU API said just now (None: the TPU does not exist)."""
    tpu_ready = tpu_state == "READY"
    provider = ctx.provider_for(spec, state)
    setting = setting_of(state, spec)
    cost = None
    if accelerator_type and tpu_ready:
        cost = held_cost(list_prices=provider.list_prices, state=state, spec=spec, now=time.time(),
                         accelerator_type=accelerator_type)
    view = None
    if tpu_ready and state.workers and (setting.enabled or state.autostop is not None):
        runner = worker0(access_for(ctx, state, spec), connect_timeout=AGENT_CONNECT_TIMEOUT)
        try:
            view = autostop_view(read_agent(runner, state.name))
        finally:
            runner.close()
    record = cache = None
    bucket = bucket_of(state, spec)
    with contextlib.suppress(TpuopsError):  # the bucket unreadable: status shows the rest
        if not tpu_ready and bucket:
            record = read_record(provider.blob_store(record_prefix(bucket, state.name)))
        if bucket and spec is not None and spec.trainer is not None and spec.trainer.framework == "jax":
            store = provider.blob_store(f"{record_prefix(bucket, state.name)}/{JAX_CACHE_DIR}")
            cache = sum(blob.size for blob in store.list())
    return GuardStatus(cost, view, setting.describe(), record, cache, tpu_gone=tpu_state is None)


def deleted_by_autostop(ctx: Context, state: ClusterState, spec: Spec | None) -> AutostopRecord | None:
    """The agent's record, when it deleted this cluster's TPU (watch must not recover from that)."""
    return deletion_record(ctx.provider_for(spec, state), state, spec)


# ------------------------------------------------------------------------------------------------ parts


def config_for(ctx: Context, access: ClusterAccess, setting: AutostopSpec) -> AgentConfig:
    state, spec, provider = access.state, access.spec, access.provider
    tpu = state.tpu_record()
    if tpu is None or tpu.status != "created":
        raise UsageError(f"cluster '{state.name}' has no TPU ready", "run `tpuops up SPEC` first")
    if tpu.mode == "node":
        raise UsageError("autostop runs on a TPU VM's worker 0; a legacy TPU Node has none")
    node, queued = tpu.node_name, tpu.queued_name
    bucket = bucket_of(state, spec)
    device_glob = tpu_paths(access, spec)[0] if spec is not None else provider.tpu_paths(False)[0]
    return agent_config(
        cluster=state.name, provider=provider.name, project=provider.project or "", zone=tpu.zone or state.zone or "",
        node=node, queued=queued, setting=setting, created_at=created_seconds(tpu) or time.time(), bucket=bucket,
        device_glob=device_glob, env=ctx.env,
        local=provider.autostop_target(state.name, node, queued, bucket, compute=tpu.kind == "compute_tpu"),
        api="compute" if tpu.kind == "compute_tpu" else "tpu", group=bool(tpu.parts),
    )


def worker0(access: ClusterAccess, connect_timeout: float | None = None) -> Runner:
    return make_runners(access, access.workers[:1], connect_timeout=connect_timeout)[0]


def created_seconds(tpu: TpuRecord | None) -> float | None:
    return epoch_seconds(tpu.created_at) if tpu is not None else None
