"""bench/check_realworld.py's data: the judgements of public trainers are complete and well formed, and the script
says which snapshots it lacks instead of scoring without them (it runs here with an empty mirror)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "check_realworld.py"
FILES = sorted((ROOT / "bench" / "check_realworld").glob("*.yaml"))
COMMANDS = sorted((ROOT / "bench" / "check_realworld" / "commands").glob("*.yaml"))
PART = re.compile(r"fit|held_out(_\d+)?")


def all_trainers() -> list[dict]:
    return [trainer for path in FILES for trainer in yaml.safe_load(path.read_text())["trainers"]]


def test_every_trainer_is_pinned_and_every_line_judged_with_a_reason() -> None:
    trainers = all_trainers()
    assert len(trainers) >= 20 and len({t["id"] for t in trainers}) == len(trainers)
    for path in FILES:
        doc = yaml.safe_load(path.read_text())
        assert doc["judged"] and doc["scope"], path.name  # who judged when, and by which scope
    for trainer in trainers:
        keys = {"id", "repo", "commit", "path", "style", "part", "lines"}
        assert keys <= set(trainer) <= keys | {"first_read_hazards", "commands"}, trainer["id"]
        assert len(trainer["commit"]) == 40 and PART.fullmatch(trainer["part"]), trainer["id"]
        for line in trainer["lines"]:
            assert set(line) == {"file", "line", "rule", "hazard", "why"} and line["why"], (trainer["id"], line)
            assert isinstance(line["hazard"], bool) and line["rule"].startswith("XLA"), (trainer["id"], line)


def test_every_trainer_has_the_commands_that_run_it_once() -> None:
    """The lint reads what a trainer's commands run: the judges name them (part 15 on), or the commands files
    do for the parts judged before, each trainer in one place only."""
    trainers = {t["id"]: t for t in all_trainers()}
    assigned: dict[str, list[str]] = {}
    for path in COMMANDS:
        doc = yaml.safe_load(path.read_text())
        assert doc["assigned"], path.name
        for tid, entry in doc["trainers"].items():
            assert tid in trainers and tid not in assigned and "commands" not in trainers[tid], (path.name, tid)
            assigned[tid] = entry["commands"]
    for tid, trainer in trainers.items():
        commands = trainer.get("commands") or assigned.get(tid)
        assert commands and all(isinstance(c, str) and c.strip() for c in commands), tid


def test_a_missing_snapshot_is_skipped_with_one_line_each(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    trainers = all_trainers()
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED ")]
    assert sorted(skipped) == sorted(
        f"SKIPPED {t['id']}: no snapshot of {t['repo']} at {tmp_path / t['repo'].replace('/', '+') / 'repo'} "
        "(fetch it)" for t in trainers)
