"""The watchdog as `tpuops watch` asks it, once per poll while the run is running: None (fine) or a verdict.

    progress  -> suspect (no new step for T)  -> confirm (two probes on every worker, a minute apart)
              -> capture (stacks, output, metrics into the incident folder) -> decide (policy) -> verdict

A run that moved on during the confirmation is not a hang. Every step is an event (printed by watch and kept
in the cluster's state); the incident folder and `watchdog.json` (what `tpuops status` shows) are written
through the provider's BlobStore.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from tpuops.access.cluster import cluster_access, logdir_of, make_runners, spec_of
from tpuops.cloud.blobs import BlobStore
from tpuops.context import Context
from tpuops.durations import format_duration
from tpuops.errors import TpuopsError
from tpuops.logs.runs import Launch, choose
from tpuops.remote.base import Runner
from tpuops.state import RunRecord
from tpuops.watchdog.capture import capture_all, incident_files, stack_signature, without_python_stacks
from tpuops.watchdog.confirm import Finding, classify, odd_by_stacks, probe_all
from tpuops.watchdog.policy import decide
from tpuops.watchdog.progress import OutputProgress, ScalarProgress, StepSeries
from tpuops.watchdog.records import (
    Incident,
    WatchdogView,
    folder_name,
    incidents,
    records_store,
    write_incident,
    write_view,
)
from tpuops.watchdog.settings import WatchdogSettings

Say = Callable[[str, str], None]  # (event kind, message)
EVENT = "hang"


@dataclass(frozen=True)
class HangVerdict:
    action: Literal["restart", "recreate", "stop"]
    reason: str
    quiet_for: float = 0.0  # seconds without a new step when it was confirmed: lost to the hang

    @property
    def recreate(self) -> bool:
        return self.action == "recreate"

    @property
    def stop(self) -> bool:
        return self.action == "stop"


@dataclass
class Watchdog:
    ctx: Context
    cluster: str
    event: Say  # printed and kept in the cluster's state
    say: Say  # printed only
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    settings: WatchdogSettings = field(default_factory=WatchdogSettings)
    run: RunRecord | None = None
    series: StepSeries = field(default_factory=StepSeries)
    scalars: ScalarProgress | None = None
    output: OutputProgress | None = None
    store: BlobStore | None = None
    output_explicit: bool = False  # the spec names a progress pattern: read worker 0's output even with scalars
    _view_written: tuple[float, str] | None = None

    # --------------------------------------------------------------------------------------- per run
    def start(self, run: RunRecord) -> None:
        state = self.ctx.store.require(self.cluster)
        spec = spec_of(state)
        self.settings = WatchdogSettings.from_spec(spec.watch if spec else None, self.ctx.env)
        self.run, self.series = run, StepSeries(started_at=self.clock())
        self.store = records_store(self.ctx, state, spec)
        if self.scalars is None and spec is not None and spec.logs.tensorboard:
            logdir = logdir_of(state, spec)  # the state and spec just read: not again by name
            store = self.ctx.provider_for(spec, state).blob_store(logdir)
            # This run and its resumes (a relaunch's files, made after the last launch known here, count as it).
            runs = choose([Launch(r.id, r.restart) for r in state.runs], None, state.name) if state.runs else None
            self.scalars = ScalarProgress(store, warn=lambda text: self.say(EVENT, text),
                                          label=runs.label if runs is not None else None)
        # Output lines count when the spec names a pattern, or while no scalars have come.
        self.output_explicit = spec is not None and spec.watch.progress is not None
        self.output = OutputProgress(self.settings.progress, self.cluster, run.id) \
            if self.output_explicit or self.scalars is None or not self.scalars.wrote_scalars else None
        if self.settings.enabled:
            source = "TensorBoard scalars" if self.scalars is not None else ""
            if self.output is not None:
                source += (" and " if source else "") + f"worker 0's output /{self.settings.progress}/"
            after = format_duration(self.settings.hang_after) if self.settings.hang_after else \
                f"10x the median gap between steps ({format_duration(self.settings.min_hang)}" \
                f"-{format_duration(self.settings.max_hang)})"
            self.say(EVENT, f"watchdog: progress of run {run.id} from {source}; hung after {after} without a new "
                            "step, counted from the first step")

    # --------------------------------------------------------------------------------------- per poll
    def verdict(self) -> HangVerdict | None:
        """judge(), but a watchdog that cannot look this time (a worker unreachable, the bucket failing) says
        so and lets the watch go on: only a confirmed hang is ever acted on."""
        try:
            return self.judge()
        except (TpuopsError, OSError) as err:
            self.say(EVENT, f"watchdog: {getattr(err, 'message', err)}; looking again at the next poll")
            return None

    def judge(self) -> HangVerdict | None:
        state = self.ctx.store.load(self.cluster)
        run = state.current_run if state else None
        if run is None:
            return None
        if self.run is None or run.id != self.run.id:
            self.start(run)
        if not self.settings.enabled:
            return None
        now = self.clock()
        self.observe(now)
        if not self.series.suspect(self.settings, now):
            self.publish(now, self.healthy_text(now), force=False)
            return None
        return self.on_suspect(now)

    def observe(self, now: float) -> None:
        if self.scalars is not None:
            try:
                points, writing = self.scalars.poll()
            except (TpuopsError, OSError) as err:
                self.say(EVENT, f"could not read the scalars: {err}; looking again at the next poll")
                points, writing = [], False
            self.series.add_points(points, now)
            if writing:
                self.series.saw_checkpoint(now)
        if self.output is not None and not self.output_explicit and self.scalars is not None and \
                self.scalars.wrote_scalars:
            self.output = None  # the scalars came: one source is enough, and it costs no SSH call
        if self.output is not None:
            runners = self.runners(first_only=True)
            try:
                self.series.add_points(self.output.poll(runners[0]), now)
            finally:
                close(runners)

    def runners(self, first_only: bool = False) -> list[Runner]:
        access = cluster_access(self.ctx, self.cluster, need_spec=False)
        workers = access.workers[:1] if first_only else access.workers
        return make_runners(access, workers)

    def healthy_text(self, now: float) -> str:
        if self.series.last_step is None:
            return "waiting for the first step (compiling is not a hang)"
        return f"ok: hung after {format_duration(self.series.threshold(self.settings))} without a new step"

    # --------------------------------------------------------------------------------------- a suspect
    def on_suspect(self, now: float) -> HangVerdict | None:
        assert self.run is not None
        quiet = self.series.quiet_for(now) or 0.0
        threshold = self.series.threshold(self.settings)
        step = self.series.last_step
        self.event(EVENT, f"no new step for {format_duration(quiet)} (last step {step}, hung after "
                          f"{format_duration(threshold)}): confirming on every worker")
        runners = self.runners()
        try:
            first = probe_all(runners, self.cluster, self.run.id)
            self.sleep(self.settings.confirm_gap)
            second = probe_all(runners, self.cluster, self.run.id)
            self.observe(self.clock())
            if not self.series.suspect(self.settings, self.clock()):
                self.event(EVENT, f"progress resumed (step {self.series.last_step}): not a hang")
                return None
            if not any(p.alive for p in second):
                return None  # the run ended meanwhile: watch judges that at its next poll
            finding = classify(first, second)
            captures = capture_all(runners, self.cluster, self.run.id)
        finally:
            close(runners)
        fallback = without_python_stacks(captures)
        # Stacks are compared only when py-spy read them all: a fallback's wait channels would differ by themselves.
        odd = finding.odd_worker or (None if fallback else
                                     odd_by_stacks({c.worker: c.stacks for c in captures}, stack_signature))
        return self.act(finding, odd, quiet, threshold, incident_files(captures, first, second), fallback=fallback)

    def act(self, finding: Finding, odd: str | None, quiet: float, threshold: float, files: dict[str, str],
            fallback: str) -> HangVerdict:
        assert self.run is not None and self.store is not None
        now = self.clock()
        decision = decide(incidents(self.store), odd, now, restarts_per_window=self.settings.restarts_per_window,
                          window=self.settings.window)
        at = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")
        url = f"{self.store.url.rstrip('/')}/incidents/{folder_name(at)}/"
        # Where py-spy did not dump, the incident says why (not installed, its install failed, could not attach).
        stacks = f"no Python stacks ({fallback}), the fallback instead" if fallback else "py-spy stacks"
        incident = Incident(at, self.run.id, finding.kind, odd, self.series.last_step, round(quiet, 1),
                            round(threshold, 1), decision.action,
                            f"{finding.detail}; {decision.why}" + (f"; {stacks}" if fallback else ""),
                            finding.workers, finding.metrics_note, url)
        write_incident(self.store, incident, files)
        what = {"restart": "restarting the run (the TPU is kept)", "recreate": "re-creating the TPU",
                "stop": f"stopped restarting: the TPU and the hung run are kept for you to look at "
                        f"(`tpuops logs {self.cluster} --incidents`; `tpuops stop {self.cluster}` ends the run)"}
        reason = (f"hang ({finding.kind}) of run {self.run.id} at step {self.series.last_step}, odd worker "
                  f"{odd or 'none found'}: {finding.detail}")
        self.event(EVENT, f"{reason}; {finding.metrics_note}; {stacks} and output tails in {url}; "
                          f"{decision.why}: {what[decision.action]}")
        done = {"restart": "restarted after a hang", "recreate": "re-created the TPU after a hang",
                "stop": "stopped restarting after a hang, the TPU and the hung run are kept for you"}
        self.publish(now, f"{done[decision.action]} ({finding.kind}, odd worker {odd or 'none found'}; "
                          f"{decision.why}); incident {url}", force=True)
        if decision.action == "stop":
            reason += f"; stopped restarting ({decision.why}): {what['stop']}"
        return HangVerdict(decision.action, reason if decision.action == "stop" else f"{reason} ({decision.why})",
                           quiet_for=quiet)

    # ---------------------------------------------------------------------------------------- status
    def publish(self, now: float, verdict: str, force: bool) -> None:
        """watchdog.json for `tpuops status`: at once when the verdict changes, else at most every status_every."""
        assert self.run is not None and self.store is not None
        kind = verdict.split(":", 1)[0]
        if not force and self._view_written is not None and self._view_written[1] == kind and \
                now - self._view_written[0] < self.settings.status_every:
            return
        view = WatchdogView(self.run.id, self.series.last_step, self.series.last_step_at,
                            self.series.threshold(self.settings) if self.series.last_step is not None else None,
                            verdict, now)
        try:
            write_view(self.store, view)
        except (TpuopsError, OSError) as err:
            self.say(EVENT, f"could not record the watchdog's view: {err}")
            return
        self._view_written = (now, kind)


def close(runners: list[Runner]) -> None:
    for runner in runners:
        runner.close()
