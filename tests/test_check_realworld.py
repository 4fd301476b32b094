"""bench/check_realworld.py's data: the judgements of public trainers are complete and well formed, and the script
says which snapshots it lacks instead of scoring without them (it runs here with an empty mirror)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "check_realworld.py"
JUDGEMENTS = ROOT / "bench" / "check_realworld" / "judgements.yaml"
PARTS = {"fit", "held_out", "held_out_2", "held_out_3"}


def test_every_trainer_is_pinned_and_every_line_judged_with_a_reason() -> None:
    doc = yaml.safe_load(JUDGEMENTS.read_text())
    trainers = doc["trainers"]
    assert len(trainers) >= 20 and len({t["id"] for t in trainers}) == len(trainers)
    for trainer in trainers:
        assert set(trainer) == {"id", "repo", "commit", "path", "style", "part", "lines"}, trainer["id"]
        assert len(trainer["commit"]) == 40 and trainer["part"] in PARTS, trainer["id"]
        for line in trainer["lines"]:
            assert set(line) == {"file", "line", "rule", "hazard", "why"} and line["why"], (trainer["id"], line)
            assert isinstance(line["hazard"], bool) and line["rule"].startswith("XLA"), (trainer["id"], line)


def test_a_missing_snapshot_is_skipped_with_one_line_each(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    trainers = yaml.safe_load(JUDGEMENTS.read_text())["trainers"]
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED ")]
    assert len(skipped) == len(trainers)
    assert skipped[0] == f"SKIPPED {trainers[0]['id']}: no snapshot of {trainers[0]['repo']} at " \
                         f"{tmp_path / trainers[0]['repo'].replace('/', '+') / 'repo'} (fetch it)"
