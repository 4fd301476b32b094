"""Let the preflight run decide what the source alone could not: how often each flagged line really ran.

The lint reports a hazard in code it takes for a step. Whether that code runs on every step is often a guess (a
loop that runs the model but ends no step, a branch behind a setting read from a config file); the run counts
the lines it executed (tpuops/check/lines.py). After a run that finished and ran the trainer's steps:
- a finding whose step ran (a file rule's: whose file ran) but whose line never did is set aside as a note: this
  configuration never runs it (a step the run never reached, another script of the code directory, says
  nothing: its findings stay as they are);
- a finding in a PyTorch/XLA step loop whose line ran on fewer than half of the loop's iterations is a note: it
  is not an every-step cost (a traced JAX or TensorFlow step runs its Python once, at tracing: only "never" counts);
- a note is a finding when the run settles its guess: its line ran on at least half of the iterations (the
  calls) of a step run at least MIN_ITERATIONS times (a step only guessed), or ran at all (a file only maybe
  imported); a JAX line traced without an error stays a note, now saying its value is static.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tpuops.check.findings import Finding
from tpuops.check.lines import LineCounts
from tpuops.check.steps import Step

MIN_ITERATIONS = 3  # fewer and a loop over two split names looks like a per-batch loop


@dataclass(frozen=True)
class Anchor:
    """Where a lint finding sits, for the run's line counts: its statement's first line, and the line whose count
    is the number of times its step ran (a loop's header, a function's first statement)."""

    statement_line: int
    step_file: str | None = None  # None: a file rule, outside any step
    step_line: int = 0  # counted once per iteration of a loop, once per call of a function (`counted_line`)
    lazy: bool = False  # a PyTorch/XLA step: its Python runs every step (a traced step's runs once, at tracing)
    loop: bool = False  # the step is a loop (else a function)
    guess: str = ""  # a note's Guess.kind ("" for a finding)


@dataclass(frozen=True)
class Guess:
    """Why a finding is only a note: "unreached" (nothing the command runs reaches its code by a name the source
    holds, or only behind a switch the command leaves off), "base" (reached only through the base of a class
    defined on import), "reach" (float16: one of the paths the code offers),
    "step" (its code is only guessed to run every step), "value" (a value only taken for a tensor), "data"
    (padding, whose cost is in the data), "trace" (in a JAX step: an error at tracing if the value is traced,
    nothing if it is static)."""

    kind: str
    why: str


Key = tuple[str, str, int]  # file, rule, line of a finding
Ran = Callable[[str, int], int]  # how many times the run executed a line (file relative to the code, number)


def finding_key(finding: Finding) -> Key:
    return finding.file or "", finding.rule, finding.line or 0


@dataclass(frozen=True)
class Settled:
    findings: tuple[Finding, ...]
    notes: tuple[Finding, ...]
    set_aside: int = 0  # findings the run showed never or rarely ran
    confirmed: int = 0  # notes the run made findings (their lines ran every step, or failed)


def ran_a_step(steps: Sequence[Step], ran: Ran) -> bool:
    """The counts saw one of the steps the lint found run: without that (the steps ran in a process the counter
    did not reach, or never), a line not counted says nothing."""
    return any(ran(step.module.rel, counted_line(step.node)) for step in steps
               if step.root and step.module is not None and step.node is not None
               and not isinstance(step.node, ast.Call))  # a library's step (Keras fit): nothing of ours runs it


def files_to_count(anchors: Mapping[Key, Anchor], steps: Sequence[Step]) -> set[str]:
    """The files whose line counts settling reads: those of the findings and notes, of their steps, and of the
    steps `ran_a_step` looks for. Empty: nothing to settle, no need to count."""
    if not anchors:
        return set()
    files = {file for file, _, _ in anchors} | {a.step_file for a in anchors.values() if a.step_file}
    return files | {step.module.rel for step in steps if step.root and step.module is not None}


def is_loop(node: ast.AST) -> bool:
    return isinstance(node, ast.For | ast.AsyncFor | ast.While)


def counted_line(step_node: ast.AST) -> int:
    """The line counted once per run of a step: a loop's first statement (once per iteration: its header also
    counts each time the loop ends), a function's first statement after its docstring (a lambda: its own line)."""
    body = getattr(step_node, "body", None)
    if not isinstance(body, list) or not body:
        return getattr(step_node, "lineno", 0)
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1].lineno
    return body[0].lineno


def settle(findings: Sequence[Finding], notes: Sequence[Finding], anchors: Mapping[Key, Anchor],
           counts: LineCounts, steps_ran: int | None) -> Settled:
    """`counts`: how many times the run executed each line of the code directory; `steps_ran`: how many steps it
    ran, when a counter said."""
    ran = counts.ran
    kept: list[Finding] = []
    left: list[Finding] = []
    set_aside = confirmed = 0
    for finding in findings:
        anchor = anchors.get(finding_key(finding))
        reached = anchor is not None and (ran(anchor.step_file, anchor.step_line) > 0 if anchor.step_file else
                                          counts.ran_file(finding.file or ""))
        verdict = _rarely(finding, anchor, ran, steps_ran) if reached and anchor is not None else None
        if verdict is None:
            kept.append(finding)
        else:
            left.append(replace(finding, message=f"{finding.message} ({verdict})", hint=f"{finding.hint}; {RARE_HINT}"))
            set_aside += 1
    for note in notes:
        anchor = anchors.get(finding_key(note))
        verdict = None if anchor is None else _confirmed(note, anchor, ran)
        if verdict is None:
            left.append(note)
        elif anchor is not None and anchor.guess == "trace":
            left.append(replace(note, message=f"{note.message} ({verdict})"))
        else:
            kept.append(_as_finding(note, verdict))
            confirmed += 1
    return Settled(tuple(sorted(kept, key=_order)), tuple(left), set_aside, confirmed)


def settle_crash(findings: Sequence[Finding], notes: Sequence[Finding], anchors: Mapping[Key, Anchor],
                 frames: Sequence[tuple[str, int]]) -> Settled:
    """A run that failed in a line a note names (a JAX branch on a traced value raises while tracing) confirms
    the note: it is a finding, the failure its evidence."""
    failed_at = set(frames)
    kept, left = list(findings), []
    for note in notes:
        anchor = anchors.get(finding_key(note))
        lines = {(note.file or "", note.line or 0)} | ({(note.file or "", anchor.statement_line)} if anchor else set())
        if anchor is not None and lines & failed_at:
            kept.append(_as_finding(note, "the preflight failed here"))
        else:
            left.append(note)
    return Settled(tuple(sorted(kept, key=_order)), tuple(left), confirmed=len(kept) - len(findings))


RARE_HINT = "the check passes it as the preflight ran it; if the TPU run's configuration runs it every step, " \
    "give check.command that configuration"


def _order(finding: Finding) -> tuple[str, int, str]:
    return finding.file or "", finding.line or 0, finding.rule


def _count(finding: Finding, anchor: Anchor, ran: Ran) -> int:
    """A statement spread over lines may be counted at its first line or at the flagged one."""
    file = finding.file or ""
    return max(ran(file, finding.line or 0), ran(file, anchor.statement_line))


def _rarely(finding: Finding, anchor: Anchor, ran: Ran, steps_ran: int | None) -> str | None:
    count = _count(finding, anchor, ran)
    if count == 0:
        where = "its step" if anchor.step_file else "its file"
        steps = f"{steps_ran} step(s)" if steps_ran else "the trainer"
        return f"the preflight ran {steps} and {where}, never this line"
    if anchor.lazy and anchor.loop and anchor.step_file is not None:
        iterations = ran(anchor.step_file, anchor.step_line)
        if count * 2 < iterations:
            return f"the preflight ran it on {count} of {iterations} iterations of its loop: not every step"
    return None


def _confirmed(note: Finding, anchor: Anchor, ran: Ran) -> str | None:
    """What the run showed of a note's guess, if it settled it: its file ran (reach), its line ran on most runs
    of its step (step), or JAX traced it without an error (trace: a static value, the note stays)."""
    count = _count(note, anchor, ran)
    if count == 0 or anchor.guess in {"value", "data"}:  # how often a line ran: not what a value is, nor lengths
        return None
    if anchor.guess == "trace":
        return "the preflight traced it without an error: a static value"
    if anchor.lazy and anchor.step_file is not None:
        runs = ran(anchor.step_file, anchor.step_line)
        enough = runs >= (MIN_ITERATIONS if anchor.guess == "step" else 1)
        if enough and count * 2 >= runs:
            of = "iterations of its loop" if anchor.loop else "calls of its function"
            return f"the preflight ran it on {count} of {runs} {of}"
        return None
    return None if anchor.guess == "step" else f"the preflight ran it {count} time(s)"


CONFIRM_BY_RUN = "`tpuops check` without --no-run runs the trainer and decides it"
GUESS_MARK = " (a guess: "


def split_unreached(notes: Sequence[Finding], anchors: Mapping[Key, Anchor]) -> tuple[list[Finding], list[Finding]]:
    """The notes to list, and those on code the command does not seem to run (what the run did not settle of
    them): a report counts the latter and lists them only when asked."""
    listed: list[Finding] = []
    unreached: list[Finding] = []
    for note in notes:
        anchor = anchors.get((note.file or "", note.rule, note.line or 0))
        (unreached if anchor is not None and anchor.guess == "unreached" else listed).append(note)
    return listed, unreached


def as_guess(finding: Finding, why: str) -> Finding:
    """A finding the source alone cannot make sure of, as a note saying why and how to settle it."""
    return replace(finding, message=f"{finding.message}{GUESS_MARK}{why})", hint=f"{finding.hint}; {CONFIRM_BY_RUN}")


def _as_finding(note: Finding, evidence: str) -> Finding:
    """A note the run confirmed: its message without the guess `as_guess` added, with the run's evidence."""
    return replace(note, message=f"{note.message.partition(GUESS_MARK)[0]} ({evidence})",
                   hint=note.hint.removesuffix(f"; {CONFIRM_BY_RUN}"))


def confirm_padding(notes: Sequence[Finding], anchors: Mapping[Key, Anchor], ran: Ran,
                    run_findings: Sequence[Finding]) -> tuple[list[Finding], list[Finding]]:
    """Padding to the longest is a note until the run shows its cost: the trainer's step was compiled again for
    new shapes (the run's XLA101) and the padding line ran, so the examples' lengths differ (the findings it
    confirmed, the notes left)."""
    if not any(f.rule == "XLA101" for f in run_findings):
        return [], list(notes)
    confirmed, left = [], []
    for note in notes:
        anchor = anchors.get(finding_key(note))
        if note.rule == "XLA004" and anchor is not None and anchor.guess == "data" and _count(note, anchor, ran):
            confirmed.append(_as_finding(note, "the preflight ran it and compiled the step again for new shapes"))
        else:
            left.append(note)
    return confirmed, left


def merge_host_reads(findings: Sequence[Finding], notes: Sequence[Finding],
                     run_findings: Sequence[Finding]) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """The run's XLA103 on a line where the lint has XLA003 is one hazard, said once: the lint's finding (a note
    becomes one) with the run's word, not a second finding (findings, notes, run findings)."""
    seen = {(f.file, f.line) for f in run_findings if f.rule == "XLA103" and f.file is not None}

    def read_seen(finding: Finding) -> bool:
        return finding.rule == "XLA003" and (finding.file, finding.line) in seen

    merged = {(f.file, f.line) for f in [*findings, *notes] if read_seen(f)}
    evidence = "the preflight run saw this read cut the XLA graph"
    return ([replace(f, details=(*f.details, evidence)) if read_seen(f) else f for f in findings] +
            [_as_finding(n, evidence) for n in notes if read_seen(n)],
            [n for n in notes if not read_seen(n)],
            [f for f in run_findings if not (f.rule == "XLA103" and (f.file, f.line) in merged)])
