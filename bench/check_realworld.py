"""`tpuops check`'s lint on public trainers nobody here wrote: precision and recall against judgements made by
reading their code (bench/check_realworld/judgements.yaml).

Each trainer is a code directory (or one file) of a public repository at a pinned commit. Its judgements name
every line that is an XLA hazard (`hazard: true`, whether the lint finds it or not) and every line the lint
flagged that is not one (`hazard: false`), each with the rule and why. This script takes the repositories'
git directories from a mirror root (`fetch` puts them in /work/.mirror/OWNER+NAME/repo), extracts each trainer at
its commit into a temporary directory, runs the lint on it and scores:

- precision: the findings on lines judged hazards (for that rule) over all findings; a finding on a line no
  judgement names is counted as a false alarm and listed as UNJUDGED (judge it, then run again);
- recall: the hazards the lint found over all hazards judged.

Both count findings (what fails `check`). Notes (what the lint reports without failing it: code only guessed to
run every step, to be confirmed by the run) are counted apart: how many, how many on hazards, and the recall of
findings and notes together, and with only the notes `check` lists (those on code the command does not seem
to run are counted in its summary, listed with `--all-notes`: "unlisted" here). An unjudged note is listed as
UNJUDGED (note) or UNJUDGED (unlisted).

Reported for the whole set and for each part, in the order the parts were judged (`fit` was judged before the
rule changes of issue 33 and used to make them; each later part was judged before any change it prompted; from
held_out_6 on, its judges wrote the hazards down without running the lint, and its findings were judged after).
A trainer whose repository or commit is not in the
mirror is skipped with one line saying which. Nothing of the trainers' code is kept.

Usage: python bench/check_realworld.py /work/.mirror [--show] [--tpuops DIR] [--judgements FILE]
       (--tpuops: import tpuops from DIR, e.g. an extracted older tree, to score the lint as it was there)
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
JUDGEMENTS = ROOT / "bench" / "check_realworld"  # judgements.yaml (the first set), then one file per later part

Site = tuple[str, str, str, int]  # trainer id, rule, file (relative to the repository), line


@dataclass
class Tally:
    found: set[Site] = field(default_factory=set)
    hazards: set[Site] = field(default_factory=set)
    noted: set[Site] = field(default_factory=set)  # notes: what the lint reports without failing check
    unlisted: set[Site] = field(default_factory=set)  # of them, those on code the command does not seem to run

    @property
    def precision(self) -> float:
        return len(self.found & self.hazards) / len(self.found) if self.found else 1.0

    @property
    def recall(self) -> float:
        return len(self.found & self.hazards) / len(self.hazards) if self.hazards else 1.0

    def line(self, name: str) -> str:
        right = len(self.found & self.hazards)
        reported = len((self.found | self.noted) & self.hazards)
        listed = len((self.found | (self.noted - self.unlisted)) & self.hazards)
        notes = (f"{len(self.noted)} note(s), {len(self.noted & self.hazards)} right ({len(self.unlisted)} in code "
                 f"not run, {len(self.unlisted & self.hazards)} right)")
        return (f"{name:9} precision {self.precision:.2f} ({right} of {len(self.found)} findings right), "
                f"recall {self.recall:.2f} ({right} of {len(self.hazards)} hazards found); {notes}; "
                f"recall with notes {self._share(reported)} ({reported}), with listed notes {self._share(listed)} "
                f"({listed})")

    def _share(self, count: int) -> str:
        return f"{count / len(self.hazards):.2f}" if self.hazards else "1.00"


def git_dir(mirror: Path, repo: str) -> Path:
    return mirror / repo.replace("/", "+") / "repo"


def extract(git: Path, commit: str, path: str, into: Path) -> bool:
    """The trainer's Python files and shell scripts at `commit` under `into` (same relative paths as in the
    repository; what the lint reads, a command's shell script included: a snapshot may lack its large data
    files)."""
    listed = subprocess.run(["git", "-C", str(git), "ls-tree", "-r", "--name-only", commit, "--", path],
                            capture_output=True, text=True)
    files = [name for name in listed.stdout.splitlines() if name.endswith((".py", ".sh"))]
    if listed.returncode != 0 or not files:
        return False
    archive = subprocess.run(["git", "-C", str(git), "archive", commit, "--", *files], capture_output=True)
    if archive.returncode != 0:
        return False
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return (into / path).exists()


Reported = tuple[str, int, str, str, str]  # file (relative to the repository), line, rule, message, kind
FINDING, NOTE, UNLISTED = "", "note", "unlisted"  # the kinds: a note unlisted is on code the command does not run


def lint(into: Path, path: str, commands: list[str]) -> list[Reported]:
    """Every finding and every note (what the lint reports without failing `check`), rule XLA000 (a file that
    does not parse: said, but no claim about XLA to score) left out. Given the trainer's commands, the lint reads
    what they run, as `tpuops check` does with a spec's trainer.command (an older lint, --tpuops, reads every
    file)."""
    from tpuops.check.lint import lint_tree

    root = into / path
    base = Path(path) if root.is_dir() else Path(path).parent
    result = lint_tree(root, commands=commands) if commands else lint_tree(root)
    notes, unlisted = list(getattr(result, "advice", ())), []
    try:
        from tpuops.check.settle import split_unreached
        notes, unlisted = split_unreached(notes, result.anchors)
    except ImportError:  # an older lint (--tpuops) lists every note
        pass
    reported = [(f, FINDING) for f in result.findings] + [(n, NOTE) for n in notes] + \
        [(n, UNLISTED) for n in unlisted]
    return [(str(base / (f.file or "")), f.line or 0, f.rule, f.message, kind) for f, kind in reported
            if f.rule != "XLA000"]


def commands_of(trainers: list[dict], assigned: list[Path]) -> dict[str, list[str]]:
    """Each trainer's commands (what runs it on the TPU, as a spec's trainer.command): from its own `commands:`
    (judges record them from part 15 on), else from the files that name them for the earlier parts."""
    found: dict[str, list[str]] = {}
    for path in assigned:
        found |= {tid: entry["commands"] for tid, entry in yaml.safe_load(path.read_text())["trainers"].items()}
    return found | {t["id"]: t["commands"] for t in trainers if t.get("commands")}


def judgement_files() -> list[Path]:
    """judgements.yaml first, then held_out_4_*.yaml, held_out_5_*.yaml, ... in the order they were judged."""
    def order(path: Path) -> tuple[bool, int, str]:
        number = re.match(r"held_out_(\d+)", path.name)
        return path.name != "judgements.yaml", int(number.group(1)) if number else 0, path.name
    return sorted(JUDGEMENTS.glob("*.yaml"), key=order)


def load(files: list[Path]) -> dict:
    """The trainers of every file, in order, and each file's `judged` line."""
    docs = [yaml.safe_load(path.read_text()) for path in files]
    return {"judged": [f"{path.name}: {doc['judged']}" for path, doc in zip(files, docs, strict=True)],
            "trainers": [trainer for doc in docs for trainer in doc["trainers"]]}


def parts(doc: dict) -> list[str]:
    """The parts of the set in the order they were judged (their first trainer's place)."""
    return list(dict.fromkeys(trainer["part"] for trainer in doc["trainers"]))


def score(mirror: Path, doc: dict, show: bool, commands: dict[str, list[str]]) -> dict[str, Tally]:
    tallies = {part: Tally() for part in ("all", *parts(doc))}
    for trainer in doc["trainers"]:
        git = git_dir(mirror, trainer["repo"])
        if not git.is_dir():
            print(f"SKIPPED {trainer['id']}: no snapshot of {trainer['repo']} at {git} (fetch it)")
            continue
        with tempfile.TemporaryDirectory(prefix="check-realworld-") as temp:
            if not extract(git, trainer["commit"], trainer["path"], Path(temp)):
                print(f"SKIPPED {trainer['id']}: {trainer['repo']} has no commit {trainer['commit'][:12]} with "
                      f"{trainer['path']} in {git} (fetch a snapshot that holds it)")
                continue
            try:
                findings = lint(Path(temp), trainer["path"], commands.get(trainer["id"], []))
            except RecursionError as err:  # an older lint (--tpuops) may crash where this one does not
                print(f"CRASHED {trainer['id']}: the lint raised {type(err).__name__}; its hazards count as missed")
                findings = []
            temp_sources = {f: (Path(temp) / f).read_text(errors="replace") for f, *_ in findings}
            sources = {f: text.splitlines() for f, text in temp_sources.items()}
        judged = {(j["rule"], j["file"], j["line"]): j for j in trainer.get("lines", [])}
        findings = on_judged_lines(findings, judged, sources_of(temp_sources))
        found = {(trainer["id"], rule, file, line) for file, line, rule, _, kind in findings if kind == FINDING}
        noted = {(trainer["id"], rule, file, line) for file, line, rule, _, kind in findings if kind} - found
        unlisted = {(trainer["id"], rule, file, line) for file, line, rule, _, kind in findings
                    if kind == UNLISTED} - found
        hazards = {(trainer["id"], r, f, n) for (r, f, n), j in judged.items() if j["hazard"]}
        for part in ("all", trainer["part"]):
            tallies[part].found |= found
            tallies[part].noted |= noted
            tallies[part].unlisted |= unlisted
            tallies[part].hazards |= hazards
        for file, line, rule, message, note in findings:
            judgement = judged.get((rule, file, line))
            kind = f" ({note})" if note else ""
            if judgement is None:
                print(f"UNJUDGED{kind} {trainer['id']} {file}:{line}: {rule} {message}")
            elif show:
                verdict = "right" if judgement["hazard"] else "FALSE"
                text = sources[file][line - 1].strip() if line <= len(sources[file]) else ""
                print(f"{verdict:5}{kind} {trainer['id']} {file}:{line}: {rule}: {text[:90]}")
        for rule, file, line in sorted(k for k, j in judged.items() if j["hazard"]):
            if (trainer["id"], rule, file, line) not in found | noted:
                print(f"MISSED {trainer['id']} {file}:{line}: {rule} ({judged[(rule, file, line)]['why']})")
    return tallies


def sources_of(texts: dict[str, str]) -> dict[str, ast.Module | None]:
    trees: dict[str, ast.Module | None] = {}
    for name, text in texts.items():
        try:
            trees[name] = ast.parse(text)
        except SyntaxError:
            trees[name] = None
    return trees


def statement_start(tree: ast.Module | None, line: int) -> int:
    """The first line of the innermost statement holding `line` (of a compound statement, only its header)."""
    starts = [node.lineno for node in (ast.walk(tree) if tree is not None else ())
              if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)
              and not _in_body(node, line)]
    return max(starts, default=line)


def _in_body(node: ast.stmt, line: int) -> bool:
    body = getattr(node, "body", None)
    return isinstance(body, list) and bool(body) and line >= body[0].lineno


def on_judged_lines(findings: list[Reported], judged: dict, trees: dict[str, ast.Module | None]) -> list[Reported]:
    """The judges record a multi-line statement at its first line (JUDGING.md); the lint names the line of the
    call it flags, which may be further down. A finding not on a judged line moves to its statement's first
    line, and the findings of one statement count once (a finding before a note: `lint` lists findings first)."""
    placed: dict[tuple[str, int, str], Reported] = {}
    for file, line, rule, message, note in findings:
        if (rule, file, line) not in judged:
            line = statement_start(trees.get(file), line)
        placed.setdefault((file, line, rule), (file, line, rule, message, note))
    return list(placed.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mirror", type=Path, help="where the snapshots are: MIRROR/OWNER+NAME/repo")
    parser.add_argument("--judgements", type=Path, action="append",
                        help="a judgements file (repeatable); default: every .yaml in bench/check_realworld/")
    parser.add_argument("--show", action="store_true", help="list every finding with its verdict and line")
    parser.add_argument("--tpuops", type=Path, default=ROOT, help="import tpuops from this tree")
    parser.add_argument("--commands", type=Path, action="append",
                        help="a file naming the trainers' commands (repeatable); default: bench/check_realworld/"
                             "commands/*.yaml")
    parser.add_argument("--every-file", action="store_true",
                        help="lint every file of each trainer, as without a spec's command")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tpuops.resolve()))
    doc = load(args.judgements or judgement_files())
    print(f"{len(doc['trainers'])} trainers from {len({t['repo'] for t in doc['trainers']})} repositories; "
          f"lint from {args.tpuops}")
    for judged in doc["judged"]:
        print(f"  judged {judged}")
    assigned = [] if args.every_file else args.commands or sorted((JUDGEMENTS / "commands").glob("*.yaml"))
    commands = {} if args.every_file else commands_of(doc["trainers"], assigned)
    print(f"  commands of {sum(t['id'] in commands for t in doc['trainers'])} trainers: the lint reads what they "
          f"run" if commands else "  no commands: the lint reads every file")
    tallies = score(args.mirror, doc, args.show, commands)
    for part in ("all", *parts(doc)):
        print(tallies[part].line(part))
    return 0


if __name__ == "__main__":
    sys.exit(main())
