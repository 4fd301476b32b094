"""What `check` reports: findings (frozen, with ids) and the record of the run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
    steps: int
    exit_code: int | None  # None: ended by the timeout
    duration: float
    compilations: int
    timed_out: bool = False

    @property
    def notes(self) -> list[str]:
        return []

    @property
    def steps_per_second(self) -> float | None:
        ok = self.exit_code == 0 and not self.timed_out and self.duration > 0
        return round(self.steps / self.duration, 2) if ok else None

    def as_dict(self) -> dict[str, object]:
        return {"command": self.command, "framework": self.framework, "steps": self.steps,
                "exit_code": self.exit_code, "timed_out": self.timed_out, "duration": round(self.duration, 2),
                "compilations": self.compilations, "steps_per_second": self.steps_per_second}


@dataclass(frozen=True)
class CheckReport:
    spec: str
    files_linted: int
    findings: tuple[Finding, ...] = ()
    run: RunRecord | None = None  # None with --no-run
    ignored: int = 0  # findings silenced by `# tpuops: ignore[...]`
    steps_found: tuple[Mapping[str, object], ...] = ()  # the compiled steps the lint recognised

    @property
    def exit_code(self) -> int:
        return 1 if self.findings else 0

    @property
    def notes(self) -> list[str]:
        """What the verdict does not cover: a lint that found no step to apply its step rules to."""
        notes = [] if self.steps_found or not self.files_linted else [NO_STEP_NOTE]
        return notes + (self.run.notes if self.run is not None else [])

    def as_dict(self) -> dict[str, object]:
        return {"spec": self.spec, "ok": not self.findings, "files_linted": self.files_linted,
                "ignored": self.ignored, "steps_found": [dict(s) for s in self.steps_found], "notes": self.notes,
                "findings": [f.as_dict() for f in self.findings],
                "run": None if self.run is None else self.run.as_dict()}
