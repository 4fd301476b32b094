"""What `watch` concludes from one poll: the TPU's state and each worker's run state judged into a verdict
(fine, ended, recover), and the options and result of a watch. Plain values and pure functions: `ops/watch.py`
acts on them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from tpuops.cloud.base import DEAD_QUEUED_STATES, DEAD_TPU_STATES
from tpuops.cloud.kinds.base import MISSING
from tpuops.cloud.kinds.tpu import READY
from tpuops.errors import TpuopsError

EventHandler = Callable[[str, str, str], None]  # (time, kind, message)
# Who called for a verdict: the TPU API (the TPU's or its queued resource's state, a lost slice, its health), the
# run's state on the workers (over SSH), the hang watchdog, or the cost guard's record in the bucket.
Origin = Literal["tpu", "workers", "watchdog", "autostop"]
# Worker states in which the trainer is gone without leaving an exit code (a fresh host has no run: "none").
GONE = frozenset({"lost", "none"})
UNREACHABLE = "unreachable"
# Event kinds kept in the cluster's state; `tpuops status` lists the "restart" ones.
RESTART_EVENT = "restart"
# Knobs tests (and impatient users) set small; the CLI options win over them.
ENV_KNOBS = {"poll_interval": "TPUOPS_WATCH_INTERVAL", "unhealthy_grace": "TPUOPS_WATCH_UNHEALTHY_GRACE",
             "backoff": "TPUOPS_WATCH_BACKOFF"}


class WatchGaveUp(TpuopsError):
    """Recovery was needed more often than --max-restarts allows, or kept failing."""


@dataclass(frozen=True)
class WatchOptions:
    max_restarts: int = 10
    restart_on_failure: bool = False
    wait_for_capacity: float = 0.0  # seconds `up` keeps retrying a zone without capacity
    poll_interval: float = 30.0
    unhealthy_grace: float = 600.0  # an UNHEALTHY TPU (or unreachable workers) gets this long to come back
    backoff: float = 30.0  # first wait between failed recovery attempts (exponential, capped)
    backoff_max: float = 600.0
    down: bool = False  # tear down once the watch ends by itself (never after Ctrl-C)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **given: object) -> WatchOptions:
        """Options given (None: not given), else TPUOPS_WATCH_* from the environment, else the defaults."""
        values: dict[str, object] = {field_name: float(env[variable]) for field_name, variable in ENV_KNOBS.items()
                                     if env.get(variable)}
        values.update({key: value for key, value in given.items() if value is not None})
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TpuView:
    """What the cloud says about the cluster's TPU: its state (MISSING when gone), health, queued state."""

    state: str
    health: str | None = None
    queued_state: str | None = None
    lost_slice: str | None = None  # Multislice: "NAME-1 PREEMPTED", a slice the whole run cannot go on without


@dataclass(frozen=True)
class Verdict:
    kind: Literal["fine", "ended", "recover"]
    reason: str = ""  # for people: printed and kept, never read back (`origin` says where the verdict came from)
    origin: Origin | None = None  # None: fine, nothing to act on
    exit_code: int = 0
    recreate: bool = True  # recover: delete and create the TPU again (False: relaunch only)
    keep_tpu: bool = False  # ended: keep the TPU even with --down (the watchdog stopped restarting a hung run)
    confirmed: bool = False  # recover: its judge has confirmed it already (the watchdog, over SSH): act at once
    lost_for: float = 0.0  # recover: seconds already lost before the verdict (a hang's time without a new step)


FINE = Verdict("fine")


def counts_as_preemption(verdict: Verdict) -> bool:
    """A recovery the TPU API called for on its own (the TPU, its queued resource or a slice dead or gone, or its
    health bad past the grace), not one the watchdog confirmed: what a pool's churn counts (ops/pool_move.py)."""
    return verdict.origin == "tpu" and verdict.recreate and not verdict.confirmed


@dataclass(frozen=True)
class WatchResult:
    cluster: str
    run_id: str | None
    exit_code: int
    reason: str
    restarts: int  # restarts carried out by this watch
    torn_down: bool = False
    keep_tpu: bool = False

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "run_id": self.run_id, "exit_code": self.exit_code, "reason": self.reason,
                "restarts": self.restarts, "torn_down": self.torn_down, "keep_tpu": self.keep_tpu}


# ------------------------------------------------------------------------------------------------ verdicts


def judge_tpu(tpu: TpuView) -> Verdict | None:
    """A verdict from the TPU alone (dead, missing, or not ready yet), or None: look at the run."""
    if tpu.queued_state in DEAD_QUEUED_STATES:
        return Verdict("recover", f"queued resource {tpu.queued_state}", origin="tpu")
    if tpu.lost_slice:
        return Verdict("recover", f"slice {tpu.lost_slice} (Multislice cannot go on with a slice missing)",
                       origin="tpu")
    if tpu.state in DEAD_TPU_STATES or tpu.state == MISSING:
        return Verdict("recover", f"TPU {tpu.state}", origin="tpu")
    if tpu.state != READY:
        return FINE  # CREATING, REPAIRING, RESTARTING...: the cloud is working on it; look again later
    return None


def is_unhealthy(tpu: TpuView) -> bool:
    return bool(tpu.health) and (tpu.health.startswith("UNHEALTHY") or tpu.health == "TIMEOUT")  # type: ignore[union-attr]


def judge_run(states: dict[str, str], restart_on_failure: bool) -> Verdict:
    """The verdict from each worker's state of the run (setup | starting | running | exited N | setup failed N |
    killed | lost | none | unreachable)."""
    values = list(states.values())
    if not values or any(state in ("setup", "starting", "running") for state in values):
        return FINE
    if all(state in GONE for state in values):
        return Verdict("recover", "every worker's trainer is gone without an exit code", origin="workers")
    if any(state == UNREACHABLE for state in values):
        return FINE  # the rest ended or is gone: wait for the unreachable ones (their grace runs meanwhile)
    if any(state == "killed" for state in values):
        return Verdict("ended", "the run was stopped (tpuops stop)", origin="workers", exit_code=1)
    codes = [int(state.split()[1]) if state.startswith("exited ") else 255 for state in values]
    worst = max(codes)
    if worst == 0:
        return Verdict("ended", "every worker exited 0", origin="workers")
    failed = ", ".join(f"{w} {s}" for w, s in states.items() if s != "exited 0")
    if restart_on_failure:
        return Verdict("recover", f"the trainer failed ({failed})", origin="workers", exit_code=worst,
                       recreate=False)
    return Verdict("ended", f"the trainer failed by itself ({failed}); not restarted without --restart-on-failure",
                   origin="workers", exit_code=worst)


def all_unreachable(states: dict[str, str]) -> bool:
    return bool(states) and all(state in (UNREACHABLE, *GONE) for state in states.values()) and \
        UNREACHABLE in states.values()


# ------------------------------------------------------------------------------------------------ watcher
