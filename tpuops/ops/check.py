"""`tpuops check SPEC`: lint the trainer's source, then run it for a few steps under XLA on this machine's CPU
and read the frameworks' compilation reports. Nothing in the cloud is touched; no credentials are needed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tpuops.check.compiles import CompileLog, compile_findings, trainer_compilations
from tpuops.check.counters import TorchCounters, read_torch_counters, transfer_findings
from tpuops.check.findings import CheckReport, Finding, RunRecord
from tpuops.check.lines import LineCounts, line_counting_env
from tpuops.check.lint import LintResult, lint_tree
from tpuops.check.run import LastTraceback, Outcome, prepare_workspace, run_trainer, trainer_environment
from tpuops.check.settle import (
    Settled,
    confirm_padding,
    files_to_count,
    merge_host_reads,
    ran_a_step,
    settle,
    settle_crash,
    split_unreached,
)
from tpuops.errors import TpuopsError, UsageError
from tpuops.ops.specs import load_checked
from tpuops.remote.base import LineHandler
from tpuops.spec import Spec

DEFAULT_STEPS = 20
DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True)
class CheckOptions:
    steps: int = DEFAULT_STEPS
    timeout: float = DEFAULT_TIMEOUT
    run: bool = True
    run_after_lint_findings: bool = True  # False (the preflight): a lint finding already decides, skip the run


def check_spec(spec_path: str | Path, options: CheckOptions = CheckOptions(),
               on_output: Callable[[str], None] | None = None) -> CheckReport:
    """Lint and (unless options.run is False) run; the report's exit_code is 0 clean, 1 with findings."""
    if options.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {options.steps}", "for example --steps 20")
    if options.timeout <= 0:
        raise UsageError("--timeout must be positive", "for example --timeout 5m")
    spec = load_checked(spec_path)  # checks the trainer, creates nothing
    spec_dir = Path(spec_path).resolve().parent
    code_root = (spec_dir / spec.code.path).resolve()
    lint = lint_tree(code_root, spec.code.exclude, legacy_node=spec.tpu.mode == "node", commands=_commands(spec))
    findings, advice = list(lint.findings), list(lint.advice)
    record = None
    if options.run and (options.run_after_lint_findings or not findings):
        if spec.trainer is None:
            raise UsageError(f"{spec_path} has no trainer to run", "add trainer: {framework, command}, or pass "
                             "--no-run to only lint")
        run_findings, record, counts, failed_at = _run(spec, spec_dir, options, lint, on_output)
        settled = _settled_by_run(lint, record, counts, failed_at)
        if settled is not None:
            findings, advice = list(settled.findings), list(settled.notes)
            record = replace(record, lines_counted=_finished(record), set_aside=settled.set_aside,
                             confirmed=settled.confirmed)
        noted = len(advice)
        findings, advice, run_findings = merge_host_reads(findings, advice, run_findings)
        padding, advice = confirm_padding(advice, lint.anchors, counts.ran, run_findings)
        findings += padding
        if len(advice) < noted:
            record = replace(record, confirmed=record.confirmed + noted - len(advice))
        findings += run_findings
    listed, unreached = split_unreached(advice, lint.anchors)
    return CheckReport(str(spec_path), lint.files, tuple(findings), record, lint.ignored,
                       tuple(lint.steps_found), tuple(listed), lint.scope, tuple(unreached))


def _settled_by_run(lint: LintResult, record: RunRecord, counts: LineCounts,
                    failed_at: list[tuple[str, int]]) -> Settled | None:
    """The lint's findings and notes as the run settles them: by the lines it ran (a run that finished and ran a
    step the lint found), or by where it failed; None when it says nothing of them."""
    if _finished(record) and ran_a_step(lint.steps, counts.ran):
        return settle(lint.findings, lint.advice, lint.anchors, counts, record.steps_ran)
    if failed_at:
        return settle_crash(lint.findings, lint.advice, lint.anchors, failed_at)
    return None


def _finished(record: RunRecord) -> bool:
    """Only a run that ended well says which lines a run of the trainer runs (a crash stops before most)."""
    return record.exit_code == 0 and not record.timed_out


def _commands(spec: Spec) -> list[str]:
    """What runs the trainer: its command, and the preflight's when the spec gives one."""
    if spec.trainer is None:
        return []
    return [spec.trainer.command] + ([spec.check.command] if spec.check.command else [])


def _run(spec: Spec, spec_dir: Path, options: CheckOptions, lint: LintResult,
         on_output: Callable[[str], None] | None) -> tuple[list[Finding], RunRecord, LineCounts, list[tuple[str, int]]]:
    """The run's findings and record, how many times each line of the code ran, and where it failed (the code
    directory's frames of its last traceback)."""
    assert spec.trainer is not None
    framework = spec.trainer.framework
    with tempfile.TemporaryDirectory(prefix="tpuops-check-") as temp:
        workspace = prepare_workspace(spec, spec_dir, Path(temp))
        log = CompileLog(framework, workspace.code)
        traceback = LastTraceback(workspace.code)

        def on_line(line: str) -> bool:
            traceback.feed(line)
            report = log.feed(line)
            if on_output is not None and not report:
                on_output(line)
            return report

        command = workspace.localize(_preflight_command(spec))
        env = trainer_environment(spec, workspace, options.steps)
        counted = files_to_count(lint.anchors, lint.steps)
        if counted:  # tracing lines costs the run time: only when there is a lint finding or note to settle
            env.update(line_counting_env(workspace.code, workspace.lines, env.get("PYTHONPATH"), counted))
        outcome = run_trainer(command, workspace.code, env, options.timeout, on_line)
        counts = LineCounts.read(workspace.lines)
        counters = read_torch_counters(workspace.torch_metrics) if framework == "pytorch" else None
        steps_ran, source = _steps_ran(counters, workspace.logdir, options.steps)
    findings = compile_findings(log, lint.functions, steps_ran or options.steps) + _outcome_findings(outcome, options)
    if counters is not None and not any(f.rule == "XLA103" for f in findings):
        findings += transfer_findings(counters)
    record = RunRecord(_preflight_command(spec), framework, options.steps, outcome.exit_code, outcome.duration,
                       trainer_compilations(log, lint.functions), outcome.timed_out, steps_ran, source,
                       counters.as_dict() if counters is not None else log.counters)
    return findings, record, counts, traceback.frames if outcome.exit_code not in (0, None) else []


def _preflight_command(spec: Spec) -> str:
    """check.command when the spec gives one (its preflight configuration), else trainer.command."""
    assert spec.trainer is not None
    return spec.check.command or spec.trainer.command


def _steps_ran(counters: TorchCounters | None, logdir: Path, asked: int) -> tuple[int | None, str]:
    """PyTorch/XLA counts its step ends (MarkStep); for the others, the trainer's TensorBoard scalars in
    TPUOPS_LOGDIR tell, when they reach the last step asked for or beyond (a trainer that logs every 50 steps
    says nothing about a run of 20)."""
    last = _last_scalar_step(logdir)
    if counters is not None:
        if counters.step_ends > asked and last == asked:  # an MpDeviceLoader ends a step per batch as well
            return last, f"its TensorBoard scalars stop at step {last} (torch_xla counted {counters.step_ends} " \
                         "step ends: its device loader ends one per batch too)"
        return counters.step_ends, "torch_xla's MarkStep counter"
    if last is None:
        return None, "the trainer wrote no scalars to TPUOPS_LOGDIR"
    if last >= asked:
        return last, f"its TensorBoard scalars reach step {last}"
    return None, f"its TensorBoard scalars stop at step {last}"


def _last_scalar_step(logdir: Path) -> int | None:
    if not logdir.is_dir() or not any("tfevents" in p.name for p in logdir.rglob("*")):
        return None
    from tpuops.cloud.blobs import DirBlobStore
    from tpuops.logs.tail import read_scalars

    try:
        points = read_scalars(DirBlobStore(logdir))
    except (OSError, ValueError):
        return None  # a half-written event file: no step count rather than a failed check
    return max((p.step for p in points), default=None)


def _outcome_findings(outcome: Outcome, options: CheckOptions) -> list[Finding]:
    if outcome.timed_out:
        return [Finding("XLA105", "timeout", f"the trainer did not finish {options.steps} steps in "
                        f"{options.timeout:g} s", "stop after TPUOPS_MAX_STEPS steps when TPUOPS_PREFLIGHT=1 (the "
                        "templates do), use a smaller model for the check, or pass a longer --timeout",
                        details=outcome.tail)]
    if outcome.exit_code != 0:
        last = outcome.tail[-1] if outcome.tail else "(no output)"
        return [Finding("XLA104", "trainer-failed", f"the trainer exited with code {outcome.exit_code}: {last}",
                        "run the command yourself in the code directory to see the whole error",
                        details=outcome.tail)]
    return []


class PreflightFailed(TpuopsError):
    """`launch --preflight` / `run --preflight` found problems: nothing in the cloud was touched."""

    def __init__(self, spec_path: str | Path, report: CheckReport) -> None:
        first = report.findings[0]
        where = f"{first.where}: " if first.where else ""
        more = f" (and {len(report.findings) - 1} more)" if len(report.findings) > 1 else ""
        super().__init__(f"preflight: {where}{first.rule} {first.name}: {first.message}{more}",
                         f"`tpuops check {spec_path}` shows them all; fix them, silence one with "
                         "`# tpuops: ignore[RULE]`, or go without --preflight")
        self.report = report


def preflight_output(on_line: LineHandler | None) -> Callable[[str], None] | None:
    """The preflight trainer's output, shown as the workers' is, prefixed [preflight]."""
    return None if on_line is None else lambda line: on_line("preflight", "stdout", line)


def require_clean(spec_path: str | Path, on_output: Callable[[str], None] | None = None) -> CheckReport:
    """The preflight of launch/run: `check` with the defaults, but no run after a lint finding (the finding
    decides already); `on_output` shows the trainer's output as it runs. Raises PreflightFailed on any finding."""
    report = check_spec(spec_path, CheckOptions(run_after_lint_findings=False), on_output)
    if report.findings:
        raise PreflightFailed(spec_path, report)
    return report
