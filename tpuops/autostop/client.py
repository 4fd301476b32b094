"""The cost guard, client side: the agent's configuration, installing it on worker 0, `autostop NAME 30m|off`,
what `status` shows about it (setting, time left, last failure, the record left in the bucket) and the
cost so far at the catalog's list price.

The agent itself runs on worker 0 (`tpuops/shipped/autostop_agent.py`); `tpuops.autostop.remote` talks to it.
Everything here takes plain values (no Context), so up/launch/status/down/watch can call it as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tpuops import catalog
from tpuops.autostop.remote import (
    DEFAULT_TICK_SECONDS,
    AgentConfig,
    AgentInstall,
    AgentReport,
    AgentStop,
    LocalTarget,
    install_agent,
    stop_agent,
)
from tpuops.cloud.endpoints import base_url
from tpuops.durations import format_duration
from tpuops.errors import TpuopsError
from tpuops.remote.base import Runner
from tpuops.spec.autostop import AutostopSpec
from tpuops.state import epoch_seconds

if TYPE_CHECKING:
    from tpuops.spec import Spec
    from tpuops.state import ClusterState

TICK_ENV = "TPUOPS_AUTOSTOP_TICK"  # seconds between the agent's decisions (tests use a fraction of a second)
METADATA_HOST_ENV = "GCE_METADATA_HOST"  # google-auth's own name for the metadata server's host[:port]
TPU_ENDPOINT_ENV = "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU"
COMPUTE_ENDPOINT_ENV = "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE"
STORAGE_ENDPOINT_ENV = "STORAGE_EMULATOR_HOST"
WARN_SECONDS = 60.0


# ------------------------------------------------------------------------------------------- configuration


def agent_config(
    *,
    cluster: str,
    provider: Literal["gcp", "local"],
    project: str,
    zone: str,
    node: str,
    queued: str | None,
    setting: AutostopSpec,
    created_at: float,
    bucket: str | None,
    device_glob: str,
    env: Mapping[str, str],
    local: LocalTarget | None = None,
    api: Literal["tpu", "compute"] = "tpu",
    group: bool = False,
) -> AgentConfig:
    """The agent's configuration for one cluster. Endpoints come from the same variables the CLI used, so
    the agent on the TPU reaches what the CLI reached; `device_glob` is launch's (`ops.remote.tpu_paths`);
    `local` is the provider's `autostop_target` (None: a Google API); `api` which Google API deletes the TPU, and
    with `compute` whether it is a slice's group (`group`) or one instance."""
    tick = float(env.get(TICK_ENV) or DEFAULT_TICK_SECONDS)
    return AgentConfig(
        cluster=cluster,
        provider=provider,
        project=project,
        zone=zone,
        node=node,
        queued=queued,
        idle_seconds=setting.idle,
        max_hours=setting.max_hours,
        created_at=created_at,
        bucket=bucket,
        device_glob=device_glob,
        tpu_endpoint=base_url(env.get(TPU_ENDPOINT_ENV)),
        storage_endpoint=base_url(env.get(STORAGE_ENDPOINT_ENV)),
        metadata_host=env.get(METADATA_HOST_ENV) or None,
        local=local,
        api=api,
        group=group,
        compute_endpoint=base_url(env.get(COMPUTE_ENDPOINT_ENV)),
        tick_seconds=tick,
        warn_seconds=min(WARN_SECONDS, tick),  # a one-minute warning; one tick when ticks are shorter
    )


# ------------------------------------------------------------------------------- install, change, stop


def install_on_worker0(runner: Runner, config: AgentConfig, *, clear_keep_alive: bool = False) -> AgentInstall:
    """Install or refresh the agent on worker 0. Never raises for the worker's sake: a worker where it cannot
    start comes back with `started=False` and an error naming it (`up` warns and still succeeds)."""
    try:
        return install_agent(runner, config, clear_keep_alive=clear_keep_alive)
    except TpuopsError as err:
        return AgentInstall(runner.name, False, error=_named(runner.name, str(err)))
    except Exception as err:  # noqa: BLE001  an unreachable worker must not fail `up`
        return AgentInstall(runner.name, False, error=f"{runner.name}: {type(err).__name__}: {err}")


def change_setting(runner: Runner, config: AgentConfig | None, cluster: str) -> AgentInstall | AgentStop:
    """`tpuops autostop NAME 30m`: (re)start the agent with the new setting and lift an earlier `off`.
    `tpuops autostop NAME off` (config None): stop the agent and leave the keep-alive file, so nothing on the
    worker deletes the TPU until a new setting is given."""
    if config is None:
        return stop_agent(runner, cluster, keep_alive=True)
    if config.idle_seconds is None and config.max_hours is None:
        raise ValueError("an agent with neither idle time nor max_hours would never act: pass None to stop it")
    return install_agent(runner, config, clear_keep_alive=True)


def stop_for_down(runner: Runner, cluster: str) -> AgentStop:
    """`down` stops the agent first, so it does not race the deletion or log a failure about it."""
    try:
        return stop_agent(runner, cluster, keep_alive=False)
    except TpuopsError as err:
        return AgentStop(runner.name, False, False, _named(runner.name, str(err)))


def _named(worker: str, message: str) -> str:
    return message if message.startswith(f"{worker}:") else f"{worker}: {message}"


# --------------------------------------------------------------------------------------------- status


@dataclass(frozen=True)
class AutostopView:
    """What `status` shows about autostop: the setting, what the agent is doing, time left, last failure."""

    setting: str  # "idle 30m, max 12h" | "off"
    agent: str  # running | not running | not installed | unreachable | deleted | keep-alive | ...
    seconds_left: float | None
    reason: str | None
    last_failure: str | None  # "HTTP 403: ... (hint: grant roles/tpu.admin to ...)"

    @property
    def time_left(self) -> str | None:
        return None if self.seconds_left is None else format_duration(self.seconds_left)

    def as_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "agent": self.agent, "seconds_left": self.seconds_left,
                "time_left": self.time_left, "reason": self.reason, "last_failure": self.last_failure}

    def line(self) -> str:
        text = f"autostop: {self.setting}"
        if self.setting != "off" or self.agent not in ("not installed",):
            text += f" ({self.agent}"
            text += f", fires in {self.time_left}" if self.time_left is not None else ""
            text += ")"
        return text + (f"; last delete failed: {self.last_failure}" if self.last_failure else "")


def autostop_view(report: AgentReport) -> AutostopView:
    setting = AutostopSpec(idle=report.idle_limit, max_hours=report.max_hours).describe() if report.installed \
        else "off"
    if report.error:
        agent = "unreachable"
    elif not report.installed:
        agent = "not installed"
    elif report.keep_alive:
        agent = "keep-alive (countdown stopped)"
    elif report.running:
        agent = "running"
    else:
        agent = report.state or "not running"
    failure = report.last_failure
    failure_text = None
    if failure is not None:
        failure_text = failure.message + (f" (hint: {failure.hint})" if failure.hint else "")
        failure_text += f", {failure.attempts} attempt{'s' * (failure.attempts != 1)}"
    return AutostopView(setting, agent, report.seconds_left, report.error or report.reason, failure_text)


# ----------------------------------------------------------------------------------------------- cost


@dataclass(frozen=True)
class CostSoFar:
    uptime_seconds: float
    per_hour: float
    dollars: float
    note: str  # "list price as of 2025-06-01, $8.00/h; TRC quota: free" | "local simulator: free"
    priced: bool = True  # False: no list price is known for the type (per_hour and dollars say nothing then)

    def line(self) -> str:
        if self.per_hour == 0.0 or not self.priced:
            return f"up {format_duration(self.uptime_seconds)}, {self.note}"
        return f"up {format_duration(self.uptime_seconds)}, about ${self.dollars:.2f} so far ({self.note})"

    def as_dict(self) -> dict[str, Any]:
        return {"uptime_seconds": round(self.uptime_seconds, 1), "per_hour": self.per_hour if self.priced else None,
                "dollars": round(self.dollars, 2) if self.priced else None, "note": self.note}


def cost_so_far(*, list_prices: bool, accelerator_type: str, spot: bool, created_at: float, now: float,
                client_vm_machine_type: str | None = None, client_vm_disk_gb: int = 0, slices: int = 1) -> CostSoFar:
    """Uptime times the catalog's list price (TPU, each slice of a Multislice, plus the client VM of a legacy
    Node). TRC quota costs
    nothing, and tpuops cannot tell whether the project runs on it, so the note says so as plan does.
    `list_prices` False: the provider's TPUs are free (the local simulator)."""
    uptime = max(0.0, now - created_at)
    if not list_prices:
        return CostSoFar(uptime, 0.0, 0.0, "local simulator: free")
    cat = catalog.load()
    accelerator = cat.accelerator(accelerator_type)
    known = accelerator.known_price_per_hour(spot=spot) if accelerator is not None else None
    if known is None:  # not $0.00: unknown (TPU7x has no public list price; a type the catalog lacks)
        what = "no list price known" if accelerator is not None else "not in the catalog"
        return CostSoFar(uptime, 0.0, 0.0, f"{accelerator_type}: {what} (catalog as of {cat.as_of}); "
                         "TRC quota: free", priced=False)
    per_hour = known * slices
    if client_vm_machine_type:
        per_hour += cat.machine_prices.get(client_vm_machine_type, 0.0)
        per_hour += client_vm_disk_gb * cat.disk_price_per_gb_month / 730
    return CostSoFar(uptime, per_hour, per_hour * uptime / 3600, f"list price as of {cat.as_of}, ${per_hour:.2f}/h; "
                     "TRC quota: free")


def held_cost(*, list_prices: bool, state: ClusterState, spec: Spec | None, now: float,
              accelerator_type: str | None = None) -> CostSoFar | None:
    """The cluster's TPU since `up` first saw it ready, at the list price of its type (the spec's unless the TPU
    API said another): spot prices for a spot or preemptible spec, each slice, a legacy Node's client VM.
    None when no TPU is held or its type or creation time is unknown."""
    tpu = state.tpu_record()
    created = epoch_seconds(tpu.created_at) if tpu is not None and tpu.status == "created" else None
    accelerator_type = accelerator_type or (spec.tpu.type if spec is not None else None)
    if tpu is None or created is None or not accelerator_type:
        return None
    client_vm = spec.client_vm if spec is not None else None
    return cost_so_far(list_prices=list_prices, accelerator_type=accelerator_type,
                       spot=bool(spec and (spec.tpu.spot or spec.tpu.preemptible)), created_at=created, now=now,
                       client_vm_machine_type=client_vm.machine_type if client_vm else None,
                       client_vm_disk_gb=client_vm.disk_gb if client_vm else 0, slices=len(tpu.node_names))
