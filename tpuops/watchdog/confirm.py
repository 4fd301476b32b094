"""Confirm a suspected hang over parallel SSH and say what kind it is.

Every worker is probed twice, `confirm_gap` apart (a minute by default): the run's state there, the processes
of its process group, and libtpu's runtime metrics (`shipped/watchdog_probe.sh` with `tpu_metrics.py`).
The kinds, and the worker that differs where one does:

    worker-gone  the trainer is gone on some workers while the others still run (they wait for it)
    device-hang  a core's (run id, program counter) did not move between the probes with programs queued:
                 the device, or a collective waiting for a peer (odd: the worker whose program differs, or
                 the one not stuck on the device while the others are)
    host-stall   duty cycle and HLO queue at zero on every worker in both probes: data loading, GCS, a lock
    stall        no metrics on these workers (not a TPU VM, no tpu-info): stalled, the cause unknown

Where the metrics tell nothing about the odd worker, the stacks captured afterwards may (see `odd_by_stacks`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuops.remote.base import Runner
from tpuops.remote.fanout import run_each
from tpuops.shipped import script_command, script_text

PROBE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Probe:
    """One worker's answer to one probe."""

    worker: str
    reachable: bool
    state: str = "unreachable"  # running | exited N | killed | lost | none | unreachable
    processes: tuple[str, ...] = ()
    metrics: dict[str, Any] | None = None
    unavailable: str | None = None  # why there are no metrics
    text: str = ""

    @property
    def alive(self) -> bool:
        return self.state == "running" and bool(self.processes)


def parse_probe(worker: str, ok: bool, stdout: bytes, error: str | None) -> Probe:
    if not ok:
        return Probe(worker, False, text=error or "unreachable")
    text = stdout.decode("utf-8", "replace")
    state, processes, metrics, unavailable = "none", [], None, None
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "state":
            state = rest.strip()
        elif word == "proc":
            processes.append(rest.strip())
        elif word == "metrics":
            try:
                metrics = json.loads(rest)
            except ValueError:
                unavailable = f"unreadable metrics: {rest[:120]}"
        elif word == "metrics-unavailable":
            unavailable = rest.strip()
    if metrics is None and unavailable is None:
        unavailable = "the metrics reader printed nothing"
    return Probe(worker, True, state, tuple(processes), metrics, unavailable, text)


def probe_all(runners: Sequence[Runner], cluster: str, run_id: str, max_parallel: int = 32) -> list[Probe]:
    argv = script_command("watchdog_probe", cluster, run_id, script_text("tpu_metrics.py"))
    results = run_each(runners, lambda r: r.run(argv, capture=True, timeout=PROBE_TIMEOUT), max_parallel)
    return [parse_probe(r.worker, r.ok, r.stdout, r.error) for r in results]


@dataclass(frozen=True)
class Finding:
    kind: str
    odd_worker: str | None
    detail: str
    metrics_note: str  # available on which workers, or why not
    workers: dict[str, str] = field(default_factory=dict)


def classify(first: Sequence[Probe], second: Sequence[Probe]) -> Finding:
    states = {p.worker: p.state for p in second}
    gone = [p.worker for p in second if p.reachable and not p.alive]
    alive = [p.worker for p in second if p.alive]
    note = metrics_note(second)
    if gone and alive:
        return Finding("worker-gone", gone[0] if len(gone) == 1 else None,
                       f"the trainer is gone on {', '.join(gone)} ({', '.join(states[w] for w in gone)}) while "
                       f"{', '.join(alive)} still run", note, states)
    before = {p.worker: p.metrics for p in first}
    measured = [p for p in second if p.metrics is not None and before.get(p.worker) is not None]
    if not measured:
        return Finding("stall", None, "processes alive everywhere, no new step; no TPU metrics to tell device "
                                      "from host", note, states)
    frozen = [p.worker for p in measured if device_frozen(before[p.worker], p.metrics)]  # type: ignore[arg-type]
    if frozen:
        return Finding("device-hang", odd_device_worker(measured, frozen),
                       f"program counters frozen with programs queued on {', '.join(frozen)}", note, states)
    if all(idle(before[p.worker]) and idle(p.metrics) for p in measured):  # type: ignore[arg-type]
        return Finding("host-stall", None, "duty cycle and HLO queue at zero on every worker: the host side "
                                           "(data, storage, a lock) is stuck", note, states)
    return Finding("stall", None, "the TPU runtime shows work moving but no new step appears", note, states)


def metrics_note(probes: Sequence[Probe]) -> str:
    have = [p.worker for p in probes if p.metrics is not None]
    if len(have) == len(probes):
        return "libtpu metrics read on every worker"
    reasons = Counter(p.unavailable or p.text for p in probes if p.metrics is None)
    why = "; ".join(f"{reason} ({count} worker(s))" for reason, count in reasons.most_common(3))
    return (f"libtpu metrics on {', '.join(have)} only; " if have else "no libtpu metrics: ") + why


def _cores(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    cores = metrics.get("cores")
    return cores if isinstance(cores, list) else []


def device_frozen(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Some core ran the same (run id, pc) in both probes and has programs waiting behind it."""
    earlier = {core.get("core"): core.get("sequencers") for core in _cores(before)}
    return any(core.get("queued", 0) > 0 and core.get("sequencers") and earlier.get(core.get("core")) ==
               core.get("sequencers") for core in _cores(after))


def idle(metrics: dict[str, Any]) -> bool:
    duty = metrics.get("duty_cycle_pct") or []
    queue = metrics.get("hlo_queue_size") or []
    return bool(duty or queue) and all(not v for v in duty) and all(not v for v in queue)


def odd_device_worker(measured: Sequence[Probe], frozen: Sequence[str]) -> str | None:
    """The worker running another program than the rest, else the one not frozen while the others are."""
    prints = {p.worker: tuple(sorted({c.get("fingerprint") for c in _cores(p.metrics or {})})) for p in measured}
    odd = minority(prints)
    if odd is not None:
        return odd
    return minority({p.worker: p.worker in frozen for p in measured})


def minority(values: dict[str, Any]) -> str | None:
    """The one worker whose value differs from all the others (which agree); None when there is no such one."""
    counts = Counter(values.values())
    if len(values) < 3 or len(counts) != 2:
        return None
    (_, most), (rare, rare_count) = counts.most_common(2)
    if rare_count != 1:
        return None
    return next(worker for worker, value in values.items() if value == rare)


def odd_by_stacks(stacks: dict[str, str], signature: Callable[[str], str]) -> str | None:
    """The one worker whose trainer stands somewhere else than all the others (by its innermost frames).
    A worker whose stacks show no frame is left out: not knowing where it stands is no place to differ from."""
    signatures = {worker: signature(text) for worker, text in stacks.items()}
    return minority({worker: sign for worker, sign in signatures.items() if sign})
