"""What the run of `tpuops check` adds to its lint, on public trainers judged line by line.

bench/check_realworld.py scores the lint alone (`--no-run`). Since the line counter (tpuops/check/lines.py), the
preflight run also settles the lint's guesses (tpuops/check/settle.py): a finding whose line never ran, or ran on
under half of its PyTorch/XLA step loop's iterations, is set aside as a note; a note whose line ran on (at least
half of) the iterations of its loop becomes a finding. This script measures that on the judged trainers that can
really run a few steps on this machine's CPU, listed with their preflight settings in
bench/check_realworld_run/runs.yaml:

    id:        the trainer, as in the judgements (its repository, commit and path come from there)
    framework: pytorch | jax | tensorflow (the spec's trainer.framework)
    command:   the preflight command (the spec's check.command): the judged command with small settings
    env:       added to the trainer's environment (check.env)
    code:      the folder of the repository sent as the code directory (default: the trainer's path, or the
               folder of a one-file trainer)
    setup:     a shell command run in the code directory before the check, to make small data files
    steps:     TPUOPS_MAX_STEPS (--steps); timeout: seconds (--timeout)
    plain:     false: no run without tpuops for this one under --plain (a slow trainer)

For each, the trainer is extracted at its commit (every file the snapshot holds, up to a size), a local spec is
written (trainer.command: the judged commands, check.command: the preflight), and `python -m tpuops check SPEC
--json` runs twice with the measurement interpreter (--python; its folder goes first on PATH, so the trainer's
`python` is that one too): with `--no-run` (BEFORE: the lint) and with the run (AFTER: what the run settled). Both
are scored as bench/check_realworld.py scores (findings on judged lines, a later line of a statement counted at
its first line; findings outside the judged path listed apart): precision, recall, notes, and every finding the
run set aside or confirmed with its judgement. The run's own findings (XLA101-105) are listed apart. A trainer
that failed to run (XLA104, XLA105) is reported with its last line and counted apart: nothing was settled.
`--plain` also runs the preflight command once without tpuops (same environment, no line counter) to time
what the counting costs.

Usage: python bench/check_realworld_run.py /work/.mirror --python /work/runvenv/bin/python [--only ID]... [--plain]
           [--save FILE]
       python bench/check_realworld_run.py /work/.mirror --totals FILE... (the totals of several --save files)

Measured (bench/check_realworld_run/RUNS.md has the numbers, the commits and what each disagreement means).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_realworld import (  # noqa: E402 (bench scripts are not a package)
    JUDGEMENTS,
    ROOT,
    Reported,
    commands_of,
    git_dir,
    judgement_files,
    load,
    on_judged_lines,
    sources_of,
)

RUNS = Path(__file__).resolve().parent / "check_realworld_run" / "runs.yaml"
COMPAT = RUNS.parent / "compat"  # `{compat}` in a run's env or setup: torch_xla 1.x names, fake data
MAX_FILE_BYTES = 20 * 1024 * 1024  # a checkpoint or data file the trainer does not need for a few steps
LINT_RULES = ("XLA001", "XLA002", "XLA003", "XLA004", "XLA005")
Site = tuple[str, str, int]  # rule, file (relative to the repository), line


@dataclass
class Scored:
    """One report (BEFORE or AFTER) on one trainer's judged lines."""

    findings: set[Site] = field(default_factory=set)
    notes: set[Site] = field(default_factory=set)
    outside: list[str] = field(default_factory=list)  # findings in files outside the judged path


@dataclass
class Total:
    found: int = 0
    right: int = 0
    hazards: int = 0
    noted: int = 0
    noted_right: int = 0

    def add(self, scored: Scored, hazards: set[Site]) -> None:
        self.found += len(scored.findings)
        self.right += len(scored.findings & hazards)
        self.hazards += len(hazards)
        self.noted += len(scored.notes)
        self.noted_right += len(scored.notes & hazards)

    def line(self, name: str) -> str:
        precision = self.right / self.found if self.found else 1.0
        recall = self.right / self.hazards if self.hazards else 1.0
        return (f"{name:7} precision {precision:.2f} ({self.right} of {self.found} findings right), recall "
                f"{recall:.2f} ({self.right} of {self.hazards} hazards found); {self.noted} note(s), "
                f"{self.noted_right} on hazards")


@dataclass
class Tallies:
    before: Total = field(default_factory=Total)
    after: Total = field(default_factory=Total)
    set_aside: dict[str, int] = field(default_factory=lambda: {"right": 0, "wrong": 0, "unjudged": 0})
    confirmed: dict[str, int] = field(default_factory=lambda: {"right": 0, "wrong": 0, "unjudged": 0})
    ran: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    not_settled: list[str] = field(default_factory=list)
    timings: list[str] = field(default_factory=list)  # the trainer's run counted against the same run plain


def extract_all(git: Path, commit: str, folder: str, into: Path) -> list[str]:
    """Every file of `folder` at `commit` that the snapshot holds (a snapshot may lack its largest files) and
    that is small enough to be code, a config or a small asset; returns the ones left out."""
    listed = subprocess.run(["git", "-C", str(git), "ls-tree", "-r", "-l", commit, "--", folder],
                            capture_output=True, text=True, check=True)
    files, left_out = [], []
    for row in listed.stdout.splitlines():
        meta, _, name = row.partition("\t")
        kind, size = meta.split()[1], meta.split()[3]
        if kind != "blob":
            continue
        (files if size.isdigit() and int(size) <= MAX_FILE_BYTES else left_out).append(name)
    for start in range(0, len(files), 500):  # a repository of thousands of files: a command line each 500
        archive = subprocess.run(["git", "-C", str(git), "archive", commit, "--", *files[start:start + 500]],
                                 capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return left_out


def code_folder(git: Path, trainer: dict, run: dict) -> str:
    """The repository folder sent as the code directory: `code`, else the trainer's path or a one-file trainer's
    folder."""
    if run.get("code"):
        return str(run["code"])
    kind = subprocess.run(["git", "-C", str(git), "cat-file", "-t", f"{trainer['commit']}:{trainer['path']}"],
                          capture_output=True, text=True).stdout.strip()
    return str(PurePosixPath(trainer["path"]).parent) if kind == "blob" else trainer["path"]


def with_compat(value: object) -> str:
    return str(value).replace("{compat}", str(COMPAT))


def write_spec(where: Path, code: Path, trainer_commands: list[str], run: dict) -> Path:
    spec = {
        "name": "realworld-run", "provider": "local", "tpu": {"type": "v2-8", "workers": 1},
        "bucket": {"name": "realworld-run-data"}, "code": {"path": str(code)},
        "trainer": {"framework": run["framework"], "command": "\n".join(trainer_commands) or run["command"]},
        "check": {"command": run["command"], "env": {k: with_compat(v) for k, v in (run.get("env") or {}).items()}},
    }
    path = where / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def check(python: str, spec: Path, env: dict[str, str], extra: list[str], timeout: float) -> tuple[dict, float]:
    started = time.monotonic()
    proc = subprocess.run([python, "-m", "tpuops", "check", str(spec), "--json", *extra], capture_output=True,
                          text=True, env=env, timeout=timeout)
    took = time.monotonic() - started
    try:
        return json.loads(proc.stdout), took
    except json.JSONDecodeError:
        raise RuntimeError(f"tpuops check gave no JSON (exit {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}") from None


def reported(report: dict, base: PurePosixPath) -> list[Reported]:
    """The lint's findings and notes in a report, as bench/check_realworld.py's `lint` gives them."""
    notes = report["advice"] + report.get("unreached", [])
    found = [(f, False) for f in report["findings"]] + [(f, True) for f in notes]
    return [(str(base / (f["file"] or "")), f["line"] or 0, f["rule"], f["message"], note)
            for f, note in found if f["rule"] in LINT_RULES]


def score(report: dict, base: PurePosixPath, judged: dict, trees: dict, judged_path: str) -> tuple[Scored, dict]:
    placed = on_judged_lines(reported(report, base), judged, trees)
    scored = Scored()
    messages = {}
    for file, line, rule, message, note in placed:
        if not _under(file, judged_path):
            scored.outside.append(f"{file}:{line} {rule}{' (note)' if note else ''}")
            continue
        (scored.notes if note else scored.findings).add((rule, file, line))
        messages[(rule, file, line)] = message
    scored.notes -= scored.findings
    return scored, messages


def _under(file: str, path: str) -> bool:
    return path in (".", "") or file == path or file.startswith(path.rstrip("/") + "/")


def verdict(site: Site, judged: dict, hazard_means_right: bool) -> str:
    judgement = judged.get(site)
    if judgement is None:
        return "unjudged"
    return "right" if judgement["hazard"] == hazard_means_right else "wrong"


def plain_run(python: str, spec: Path, steps: int, timeout: float) -> float | None:
    """The preflight command once without tpuops' line counter, in the environment `check` gives it."""
    sys.path.insert(0, str(ROOT))
    from tpuops.check.run import prepare_workspace, run_trainer, trainer_environment
    from tpuops.ops.specs import load_checked

    loaded = load_checked(spec)
    with tempfile.TemporaryDirectory(prefix="realworld-plain-") as temp:
        workspace = prepare_workspace(loaded, spec.parent, Path(temp))
        env = trainer_environment(loaded, workspace, steps)
        env["PATH"] = f"{Path(python).parent}:{env.get('PATH', '')}"
        outcome = run_trainer(workspace.localize(loaded.check.command or ""), workspace.code, env, timeout,
                              lambda line: False)
    return outcome.duration if outcome.exit_code == 0 else None


def measure(trainer: dict, run: dict, args: argparse.Namespace, commands: list[str], tallies: Tallies) -> None:
    tid = trainer["id"]
    git = git_dir(args.mirror, trainer["repo"])
    judged = {(j["rule"], j["file"], j["line"]): j for j in trainer.get("lines", [])}
    hazards = {site for site, j in judged.items() if j["hazard"]}
    with tempfile.TemporaryDirectory(prefix="realworld-run-") as temp:
        repo = Path(temp) / "repo"
        repo.mkdir()
        folder = code_folder(git, trainer, run)
        left_out = extract_all(git, trainer["commit"], folder, repo)
        code = repo / folder
        env = {**os.environ, "PATH": f"{Path(args.python).parent}:{os.environ.get('PATH', '')}",
               "PYTHONPATH": str(ROOT)}
        if run.get("setup"):
            subprocess.run(["bash", "-c", with_compat(run["setup"])], cwd=code, env=env, check=True, timeout=600)
        spec = write_spec(Path(temp), code, commands, run)
        steps, timeout = int(run.get("steps", 5)), float(run.get("timeout", 300))
        before, _ = check(args.python, spec, env, ["--no-run"], 600)
        after, took = check(args.python, spec, env, ["--steps", str(steps), "--timeout", f"{timeout:g}s", "-q"],
                            timeout + 600)
        plain = plain_run(args.python, spec, steps, timeout) if args.plain and run.get("plain", True) else None
        texts = {str(PurePosixPath(folder) / p.relative_to(code)): p.read_text(errors="replace")
                 for p in code.rglob("*.py")}
    base = PurePosixPath(folder)
    trees = sources_of({name: texts[name] for name in {r[0] for r in reported(before, base) + reported(after, base)}
                        if name in texts})
    scored_before, _ = score(before, base, judged, trees, trainer["path"])
    scored_after, messages = score(after, base, judged, trees, trainer["path"])
    record = after.get("run") or {}
    own = [f for f in after["findings"] if f["rule"] not in LINT_RULES]
    print(f"== {tid} ({trainer['repo']} {trainer['commit'][:10]}, {run['framework']}): {run['command']}")
    if left_out:
        print(f"   files left out of the extract (absent from the snapshot or too large): {len(left_out)}")
    failed = [f for f in own if f["rule"] in ("XLA104", "XLA105")]
    ran_text = (f"exit {record.get('exit_code')}, {record.get('duration')} s, steps ran {record.get('steps_ran')} "
                f"({record.get('steps_ran_source')}), lines counted: {record.get('lines_counted')}, "
                f"whole check {took:.1f} s" + (f", the same run without tpuops {plain:.1f} s" if plain else ""))
    print(f"   run: {ran_text}")
    if plain and record.get("exit_code") == 0:
        tallies.timings.append(f"{tid}: counted {record['duration']:.1f} s, plain {plain:.1f} s "
                               f"({record['duration'] / plain:.2f}x)")
    for finding in own:
        where = f"{finding['file']}:{finding['line']} " if finding["file"] else ""
        print(f"   run finding: {where}{finding['rule']} {finding['message'][:160]}")
    if failed:
        tallies.failed.append(f"{tid}: {failed[0]['message'][:200]}")
        print("   " + line_of(scored_before, hazards, "before"))
        print("   FAILED TO RUN: counted apart (nothing settled)")
        return
    if not record.get("lines_counted"):
        tallies.not_settled.append(tid)
        print("   ran, but the counts saw no step the lint found run: nothing settled")
    else:
        tallies.ran.append(tid)
    tallies.before.add(scored_before, hazards)
    tallies.after.add(scored_after, hazards)
    print("   " + line_of(scored_before, hazards, "before"))
    print("   " + line_of(scored_after, hazards, "after"))
    for site in sorted(scored_before.findings & scored_after.notes, key=_site_order):
        said = verdict(site, judged, hazard_means_right=False)
        tallies.set_aside[said] += 1
        print(f"   SET ASIDE ({said}) {_describe(site, judged, messages)}")
    for site in sorted(scored_before.notes & scored_after.findings, key=_site_order):
        said = verdict(site, judged, hazard_means_right=True)
        tallies.confirmed[said] += 1
        print(f"   CONFIRMED ({said}) {_describe(site, judged, messages)}")
    for site in sorted(scored_before.notes & scored_after.notes, key=_site_order):
        print(f"   still a note ({'hazard' if site in hazards else 'no hazard' if site in judged else 'unjudged'})"
              f" {_describe(site, judged, messages)}")
    for outside in sorted(set(scored_before.outside) | set(scored_after.outside)):
        print(f"   outside the judged path (not scored): {outside}")


def _site_order(site: Site) -> tuple[str, int, str]:
    return site[1], site[2], site[0]


def _describe(site: Site, judged: dict, messages: dict) -> str:
    rule, file, line = site
    judgement = judged.get(site)
    why = f" [judged {'hazard' if judgement['hazard'] else 'no hazard'}: {judgement['why'][:140]}]" if judgement \
        else ""
    run_said = messages.get(site, "")
    because = run_said[run_said.rfind("(the preflight"):] if "(the preflight" in run_said else ""
    return f"{file}:{line} {rule} {because}{why}"


def line_of(scored: Scored, hazards: set[Site], name: str) -> str:
    total = Total()
    total.add(scored, hazards)
    return total.line(name)


def report(tallies: Tallies) -> None:
    print(f"\n{len(tallies.ran)} trainer(s) ran and were settled: {', '.join(tallies.ran) or '-'}")
    if tallies.not_settled:
        print(f"{len(tallies.not_settled)} ran but nothing was settled: {', '.join(tallies.not_settled)}")
    for failed in tallies.failed:
        print(f"failed to run (counted apart): {failed}")
    print(tallies.before.line("before"))
    print(tallies.after.line("after"))
    print(f"set aside: {tallies.set_aside['right']} right (judged no hazard), {tallies.set_aside['wrong']} wrong "
          f"(judged a hazard), {tallies.set_aside['unjudged']} unjudged")
    print(f"confirmed: {tallies.confirmed['right']} right (judged a hazard), {tallies.confirmed['wrong']} wrong "
          f"(judged no hazard), {tallies.confirmed['unjudged']} unjudged")
    for timing in tallies.timings:
        print(f"time of the trainer's run with the line counter against without tpuops: {timing}")


def merged(paths: list[Path]) -> Tallies:
    """The tallies of several saved measurements (--save) added up."""
    total = Tallies()
    for path in paths:
        saved = json.loads(path.read_text())
        for name in ("before", "after"):
            mine, theirs = getattr(total, name), Total(**saved[name])
            for key in ("found", "right", "hazards", "noted", "noted_right"):
                setattr(mine, key, getattr(mine, key) + getattr(theirs, key))
        for name in ("set_aside", "confirmed"):
            for key, count in saved[name].items():
                getattr(total, name)[key] += count
        for name in ("ran", "failed", "not_settled", "timings"):
            getattr(total, name).extend(saved[name])
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mirror", type=Path, help="where the snapshots are: MIRROR/OWNER+NAME/repo")
    parser.add_argument("--python", default=sys.executable,
                        help="the measurement interpreter: runs tpuops and (first on PATH) the trainers")
    parser.add_argument("--runs", type=Path, default=RUNS, help="the trainers to run and how")
    parser.add_argument("--only", action="append", help="only this trainer id (repeatable)")
    parser.add_argument("--plain", action="store_true", help="also time each preflight without tpuops")
    parser.add_argument("--save", type=Path, help="also write the totals to this JSON file")
    parser.add_argument("--totals", type=Path, nargs="+", help="only print the totals of saved measurements")
    args = parser.parse_args()
    if args.totals:
        report(merged(args.totals))
        return 0
    doc = load(judgement_files())
    by_id = {t["id"]: t for t in doc["trainers"]}
    commands = commands_of(doc["trainers"], sorted((JUDGEMENTS / "commands").glob("*.yaml")))
    runs = yaml.safe_load(args.runs.read_text())["trainers"]
    tallies = Tallies()
    for run in runs:
        if args.only and run["id"] not in args.only:
            continue
        trainer = by_id[run["id"]]
        if not git_dir(args.mirror, trainer["repo"]).is_dir():
            print(f"SKIPPED {run['id']}: no snapshot of {trainer['repo']} (fetch it)")
            continue
        try:
            measure(trainer, run, args, commands.get(run["id"], []), tallies)
        except (subprocess.SubprocessError, RuntimeError, OSError) as err:
            tallies.failed.append(f"{run['id']}: {err}")
            print(f"== {run['id']}: could not be measured: {err}")
    if args.save:
        args.save.write_text(json.dumps(asdict(tallies), indent=1))
    report(tallies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
