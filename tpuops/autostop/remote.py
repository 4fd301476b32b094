"""The autostop agent on a worker, seen from the client: install or refresh it, stop it, read its state.

The agent (`tpuops/shipped/autostop_agent.py`) is sent as text on stdin and run by the worker's own python3 through
`shipped/autostop.sh`; it decides on the worker itself, so a laptop that went to sleep cannot leave
a TPU running. Its configuration is one JSON file written at install time (`AgentConfig`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from tpuops.providers.base import LocalTarget
from tpuops.remote.base import Runner, RunResult
from tpuops.shipped import program, script_command

INSTALL_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
STATUS_TIMEOUT = 20.0
DEFAULT_TICK_SECONDS = 60.0


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent needs, fixed at install time (it never asks the client anything)."""

    cluster: str
    provider: Literal["gcp", "local"]
    project: str
    zone: str
    node: str
    queued: str | None  # the queued resource to delete (with force) instead of the node
    idle_seconds: float | None  # None: no idle stop
    max_hours: float | None  # None: no hard cap
    created_at: float  # the TPU's creation time, seconds since the epoch
    bucket: str | None  # where the record of the deletion goes (gs://BUCKET/.tpuops/NAME/autostop.json)
    device_glob: str  # the TPU device files (a leading ~/ is the worker's home)
    tpu_endpoint: str | None = None  # base URL; None: https://tpu.googleapis.com
    storage_endpoint: str | None = None  # base URL; None: https://storage.googleapis.com
    metadata_host: str | None = None  # host[:port]; None: GCE_METADATA_HOST on the worker, else the default
    local: LocalTarget | None = None
    api: Literal["tpu", "compute"] = "tpu"  # compute: the TPU is a Compute Engine instance, or a slice's group
    group: bool = False  # compute: a slice's managed instance group (its VMs go with it), else one instance
    compute_endpoint: str | None = None  # base URL; None: https://compute.googleapis.com
    tick_seconds: float = DEFAULT_TICK_SECONDS
    warn_seconds: float = DEFAULT_TICK_SECONDS  # the warning logged this long before deleting

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AgentInstall:
    worker: str
    started: bool
    pid: int | None = None
    error: str | None = None  # why it did not start, naming the worker


@dataclass(frozen=True)
class AgentStop:
    worker: str
    was_running: bool
    keep_alive: bool
    error: str | None = None


@dataclass(frozen=True)
class AgentFailure:
    """The latest failed delete: HTTP status, message, the fix (e.g. the role to grant), attempts so far."""

    time: str
    status: int | None
    message: str
    hint: str
    attempts: int


@dataclass(frozen=True)
class AgentDecision:
    time: str
    action: str  # start | idle | busy | warn | keep-alive | delete-failed | retry-wait | deleted | refused | ...
    reason: str
    idle_seconds: float


@dataclass(frozen=True)
class AgentReport:
    """What the agent on a worker says about itself (all times are the worker's clock)."""

    worker: str
    installed: bool
    running: bool = False
    keep_alive: bool = False
    state: str | None = None  # the latest decision's action, or its final state (deleted, refused, stopped)
    reason: str | None = None
    now: float | None = None  # the worker's clock when it answered
    fires_at: float | None = None  # when it will delete the TPU, if nothing changes
    idle_seconds: float = 0.0
    idle_limit: float | None = None
    max_hours: float | None = None
    last_failure: AgentFailure | None = None
    log: tuple[AgentDecision, ...] = ()
    error: str | None = None  # the worker could not be asked

    @property
    def seconds_left(self) -> float | None:
        if self.fires_at is None or self.now is None or not self.running:
            return None
        return max(0.0, self.fires_at - self.now)


def install_agent(runner: Runner, config: AgentConfig, *, clear_keep_alive: bool = False) -> AgentInstall:
    """Install (or refresh: the old agent is stopped first) the agent on this worker and start it detached.
    `clear_keep_alive` removes a previous `autostop off` (an explicit new setting does)."""
    request = json.dumps({"config": config.as_json(), "clear_keep_alive": clear_keep_alive})
    argv = script_command("autostop", "install", config.cluster, request)
    result = runner.run(argv, stdin=program("autostop_agent").encode(), capture=True, timeout=INSTALL_TIMEOUT)
    answer, problem = _answer(runner.name, result, "start the autostop agent")
    if answer is None:
        return AgentInstall(runner.name, False, error=problem)
    if not answer.get("started"):
        return AgentInstall(runner.name, False, answer.get("pid"), f"{runner.name}: {answer.get('error')}")
    return AgentInstall(runner.name, True, answer.get("pid"))


def stop_agent(runner: Runner, cluster: str, *, keep_alive: bool) -> AgentStop:
    """Stop the agent on this worker; `keep_alive` also leaves the cancel file, so no later install of the
    same setting deletes the TPU until `autostop NAME DURATION` is given again."""
    argv = script_command("autostop", "stop", cluster, "keep-alive" if keep_alive else "")
    answer, problem = _answer(runner.name, runner.run(argv, capture=True, timeout=STOP_TIMEOUT), "stop the agent")
    if answer is None:
        return AgentStop(runner.name, False, False, problem)
    return AgentStop(runner.name, bool(answer.get("was_running")), bool(answer.get("keep_alive", keep_alive)))


def read_agent(runner: Runner, cluster: str, log_lines: int = 20) -> AgentReport:
    """The agent's setting, latest decision, time left, last failure and log tail on this worker."""
    argv = script_command("autostop", "status", cluster, str(log_lines))
    answer, problem = _answer(runner.name, runner.run(argv, capture=True, timeout=STATUS_TIMEOUT),
                              "read the agent's status")
    if answer is None:
        return AgentReport(runner.name, installed=False, error=problem)
    return report_from(runner.name, answer)


def report_from(worker: str, answer: dict[str, Any]) -> AgentReport:
    if not answer.get("installed"):
        return AgentReport(worker, installed=False)
    status = answer.get("status") or {}
    config = answer.get("config") or {}
    failure = status.get("last_failure")
    return AgentReport(
        worker,
        installed=True,
        running=bool(answer.get("running")),
        keep_alive=bool(answer.get("keep_alive")),
        state=status.get("state"),
        reason=status.get("reason"),
        now=answer.get("now"),
        fires_at=status.get("fires_at"),
        idle_seconds=float(status.get("idle_seconds") or 0.0),
        idle_limit=config.get("idle_seconds"),
        max_hours=config.get("max_hours"),
        last_failure=AgentFailure(failure["time"], failure.get("status"), failure["message"],
                                  failure.get("hint") or "", int(failure.get("attempts") or 1)) if failure else None,
        log=tuple(AgentDecision(e.get("time", ""), e.get("action", ""), e.get("reason", ""),
                                float(e.get("idle_seconds") or 0.0)) for e in answer.get("log") or ()),
    )


def _answer(worker: str, result: RunResult, doing: str) -> tuple[dict[str, Any] | None, str | None]:
    """The agent's JSON answer, or (None, one line naming the worker and what went wrong)."""
    stdout = result.stdout.decode("utf-8", "replace").strip()
    try:
        answer = json.loads(stdout.splitlines()[-1]) if stdout else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and result.error is None:
        return answer, None
    if result.error:
        return None, result.error if result.error.startswith(f"{worker}:") else f"{worker}: {result.error}"
    stderr = result.stderr.decode("utf-8", "replace").strip().splitlines()
    text = stderr[-1] if stderr else stdout[-200:] or f"exit code {result.exit_code}"
    return None, f"{worker}: could not {doing}: {text}"
