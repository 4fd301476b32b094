"""What `check` reports: findings (frozen, with ids) and the record of the run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tpuops.check.reach import CommandScope

NO_STEP_NOTE = "no compiled step recognised: rules XLA001-003 were not applied"


@dataclass(frozen=True)
class Finding:
    """One problem: `file:line: RULE name: message (fix: hint)`; file/line are None for run-level findings."""

    rule: str  # stable id, e.g. XLA003 (what `# tpuops: ignore[XLA003]` names)
    name: str  # short name, e.g. host-sync
    message: str
    hint: str
    file: str | None = None
    line: int | None = None
    details: tuple[str, ...] = ()  # extra lines: shapes that changed, the trainer's last output

    @property
    def where(self) -> str:
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}" if self.line else self.file

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "name": self.name, "file": self.file, "line": self.line,
                "message": self.message, "hint": self.hint, "details": list(self.details)}


@dataclass(frozen=True)
class RunRecord:
    """How the trainer's preflight run went (for the record, findings aside)."""

    command: str
    framework: str
    steps: int  # asked for (TPUOPS_MAX_STEPS)
    exit_code: int | None  # None: ended by the timeout
    duration: float
    compilations: int
    timed_out: bool = False
    steps_ran: int | None = None  # by the framework's counter (PyTorch/XLA) or the trainer's scalars; None: unknown
    steps_source: str = ""  # where steps_ran comes from
    counters: Mapping[str, int] | None = None  # the framework's own counters at the end (PyTorch/XLA, TensorFlow)
    lines_counted: bool = False  # the run counted the lines it ran, and saw a step the lint found run
    set_aside: int = 0  # lint findings it showed never or rarely ran (now notes)
    confirmed: int = 0  # lint notes it made findings (run on most iterations or calls, failed there, or read there)

    @property
    def ignored_max_steps(self) -> bool:
        return self.steps_ran is not None and self.steps_ran > self.steps

    @property
    def notes(self) -> list[str]:
        notes = []
        if self.ignored_max_steps:
            notes.append(f"the trainer ran {self.steps_ran} steps ({self.steps_source}): it ignored "
                         f"TPUOPS_MAX_STEPS={self.steps}")
        if self.set_aside or self.confirmed:
            notes.append(f"the run settled lint findings: {self.set_aside} set aside as notes (never or rarely run), "
                         f"{self.confirmed} note(s) made findings (run on most iterations, failed or read there)")
        return notes

    @property
    def steps_text(self) -> str:
        if self.steps_ran is None:
            return f"asked for {self.steps} steps (steps ran: unknown, {self.steps_source or 'no counter'})"
        if self.ignored_max_steps:
            return f"{self.steps_ran} steps"  # the verdict says it ignored TPUOPS_MAX_STEPS
        return f"{self.steps_ran} of {self.steps} steps" if self.steps_ran < self.steps else f"{self.steps} steps"

    @property
    def steps_per_second(self) -> float | None:
        ok = self.exit_code == 0 and not self.timed_out and self.duration > 0
        steps = self.steps if self.steps_ran is None else self.steps_ran
        return round(steps / self.duration, 2) if ok else None

    def as_dict(self) -> dict[str, object]:
        return {"command": self.command, "framework": self.framework, "steps": self.steps,
                "steps_ran": self.steps_ran, "steps_ran_source": self.steps_source if self.steps_ran else None,
                "ignored_max_steps": self.ignored_max_steps,
                "exit_code": self.exit_code, "timed_out": self.timed_out, "duration": round(self.duration, 2),
                "compilations": self.compilations, "steps_per_second": self.steps_per_second,
                "counters": None if self.counters is None else dict(self.counters),
                "lines_counted": self.lines_counted, "lint_set_aside": self.set_aside,
                "lint_confirmed": self.confirmed}


@dataclass(frozen=True)
class CheckReport:
    spec: str
    files_linted: int
    findings: tuple[Finding, ...] = ()
    run: RunRecord | None = None  # None with --no-run
    ignored: int = 0  # findings silenced by `# tpuops: ignore[...]`
    steps_found: tuple[Mapping[str, object], ...] = ()  # the compiled steps the lint recognised
    advice: tuple[Finding, ...] = ()  # notes that do not fail the check: likely costs to confirm by measuring
    scope: CommandScope = CommandScope()  # the files the trainer's command runs, which the lint read
    unreached: tuple[Finding, ...] = ()  # notes on code the command does not seem to run: counted, listed on demand

    @property
    def exit_code(self) -> int:
        return 1 if self.findings else 0

    @property
    def notes(self) -> list[str]:
        """What the verdict does not cover: a lint that found no step to apply its step rules to."""
        notes = [] if self.steps_found or not self.files_linted else [NO_STEP_NOTE]
        if self.scope.why_every_file:
            notes.append(f"every file linted: {self.scope.why_every_file}")
        return notes + (self.run.notes if self.run is not None else [])

    def as_dict(self) -> dict[str, object]:
        return {"spec": self.spec, "ok": not self.findings, "files_linted": self.files_linted,
                "scripts": list(self.scope.entries), "files_not_run": list(self.scope.left_out),
                "ignored": self.ignored, "steps_found": [dict(s) for s in self.steps_found], "notes": self.notes,
                "findings": [f.as_dict() for f in self.findings], "advice": [f.as_dict() for f in self.advice],
                "unreached": [f.as_dict() for f in self.unreached],
                "run": None if self.run is None else self.run.as_dict()}
