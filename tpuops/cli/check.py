"""`tpuops check SPEC`: the XLA preflight. Parse, call tpuops.ops.check.check_spec, render."""

from __future__ import annotations

import typer

from tpuops.cli.app import JSON_OPTION, app
from tpuops.cli.render import console, err_console, print_json

RULES_HELP = (
    "Lint rules (silence one line with `# tpuops: ignore[XLA003]`); XLA001-003 apply inside the compiled steps "
    "the lint recognises (jit wrappers, tf.function/strategy.run, Keras train_step, torch_xla.compile, PyTorch/XLA "
    "step loops): the summary names them, or says that it found none. "
    "XLA001 tensor-branch: Python if/while on a tensor in a compiled step. "
    "XLA002 dynamic-shape: boolean masks, nonzero(), masked_select in a step. "
    "XLA003 host-sync: .numpy(), .item(), .cpu(), float(t), print(t), a tensor formatted into a string, in a step. "
    "XLA004 pad-longest: padding to the longest example, collators without pad_to_multiple_of, tf.data "
    "padded_batch without padded_shapes. "
    "XLA005 fp16: float16 as the compute dtype where TPUs use bfloat16. "
    "XLA006/XLA007 (legacy TPU Node): Python input pipelines and local paths in tf.data. "
    "Run findings: XLA101 recompile, XLA102 compile-failed, XLA103 host-read (also a read after every PyTorch/XLA "
    "step, by its counters), XLA104 trainer-failed, XLA105 timeout; the summary says how many steps really ran. "
    "Notes (`note XLA003`, they do not fail the check): a JAX loop that reads its jitted step's result every "
    "step, a cost only a measurement confirms."
)


MAX_STEPS_SHOWN = 3
MAX_FILES_SHOWN = 3


@app.command(epilog=RULES_HELP)
def check(
    spec: str = typer.Argument(..., help="The spec file."),
    steps: int = typer.Option(20, "--steps", help="Steps to run (TPUOPS_MAX_STEPS for the trainer)."),
    timeout: str = typer.Option("5m", "--timeout", help="End the trainer (its whole process group) after this."),
    no_run: bool = typer.Option(False, "--no-run", help="Only lint the source; do not run the trainer."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not show the trainer's output while it runs."),
    all_notes: bool = typer.Option(False, "--all-notes", help="Also list the notes on code the command does not "
                                   "seem to run (counted in the summary otherwise)."),
    json_: bool = JSON_OPTION,
) -> None:
    """Preflight SPEC's trainer before paying for a TPU: lint it for XLA breakers, then run it for a few steps
    under XLA on this machine's CPU and report recompilations, compile failures and host round trips.
    Exit 0 clean, 1 findings, 2 usage or spec errors."""
    from tpuops.durations import parse_duration
    from tpuops.ops.check import CheckOptions, check_spec

    options = CheckOptions(steps=steps, timeout=parse_duration(timeout), run=not no_run)
    show = None if json_ or quiet else (lambda line: err_console.out(f"| {line}", highlight=False))
    report = check_spec(spec, options, on_output=show)
    if json_:
        print_json(report.as_dict())
    else:
        print_report(report, all_notes)
    raise typer.Exit(report.exit_code)


def print_report(report, all_notes: bool = False) -> None:  # noqa: ANN001  (CheckReport)
    for finding in report.findings:
        where = f"{finding.where}: " if finding.where else ""
        console.print(f"{where}{finding.rule} {finding.name}: {finding.message}", markup=False)
        for detail in finding.details:
            console.print(f"    {detail}", markup=False)
        console.print(f"    fix: {finding.hint}", markup=False)
    for note in (*report.advice, *(report.unreached if all_notes else ())):  # notes: they do not fail the check
        where = f"{note.where}: " if note.where else ""
        console.print(f"{where}note {note.rule} {note.name}: {note.message}", markup=False)
        console.print(f"    to do or confirm: {note.hint}", markup=False)
    if report.unreached and not all_notes:
        console.print(_unreached_text(report.unreached), markup=False)
    summary = f"{report.files_linted} file(s) linted{_scope_text(report.scope)}"
    if report.steps_found:
        names = [f"{s['name']} ({s['how']})" for s in report.steps_found[:MAX_STEPS_SHOWN]]
        more = len(report.steps_found) - len(names)
        summary += f", {len(report.steps_found)} compiled step(s): {', '.join(names)}" + \
            (f" and {more} more" if more > 0 else "")
    if report.ignored:
        summary += f", {report.ignored} finding(s) ignored by comment"
    if report.run is not None:
        run = report.run
        rate = f", {run.steps_per_second} steps/s incl. start-up" if run.steps_per_second else ""
        state = "timed out" if run.timed_out else f"exit {run.exit_code}"
        summary += (f"; ran {run.framework} trainer on CPU under XLA: {run.steps_text}, {state}, "
                    f"{run.duration:.1f} s, {run.compilations} compilation(s) of its functions{rate}")
    verdicts = [f"{len(report.findings)} finding(s)"] if report.findings else []
    verdicts += report.notes
    notes = len(report.advice) + (len(report.unreached) if all_notes else 0)
    verdicts += [f"{notes} note(s) to confirm"] if notes else []
    verdicts += [f"{len(report.unreached)} note(s) in code not run"] if report.unreached and not all_notes else []
    console.print(f"check: {'; '.join(verdicts) or 'clean'} ({summary})", markup=False)


def _unreached_text(notes) -> str:  # noqa: ANN001  (Findings)
    """One line for the notes on code the command does not seem to run: how many, where, how to see them."""
    files = list(dict.fromkeys(note.file for note in notes if note.file))
    more = len(files) - MAX_FILES_SHOWN
    shown = ", ".join(files[:MAX_FILES_SHOWN]) + (f" and {more} more" if more > 0 else "")
    return (f"{len(notes)} note(s) in code the command does not seem to run ({shown}): `--all-notes` lists them, "
            "each with why")


def _scope_text(scope) -> str:  # noqa: ANN001  (CommandScope)
    """": train.py and what it imports; 12 other(s) left out" when the command left files out."""
    if scope.files is None or not scope.left_out:
        return ""
    imports = "what it imports" if len(scope.entries) == 1 else "what they import"
    return f": {', '.join(scope.entries)} and {imports}; {len(scope.left_out)} other(s) left out"
