"""The lint of `tpuops check` measured on a corpus of trainers written in the styles of public TPU trainers
(PyTorch/XLA reference examples, Flax and NNX, Hugging Face Flax/TensorFlow/Accelerate scripts, levanter,
Equinox, Keras): precision and recall over every line `expected.json` names as a hazard (reported as a finding, or
as a note where it says `"note": true`: code only guessed to run every step), and the near misses next to them that
must stay quiet. Parsed with `ast` only: no framework is needed.
"""

from __future__ import annotations

import gc
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tpuops.check.lint import LintResult, lint_tree

CORPUS = Path(__file__).resolve().parent / "check_corpus"
TRAINERS = sorted(p for p in CORPUS.iterdir() if (p / "expected.json").is_file())
MIN_PRECISION = 0.95
MIN_RECALL = 0.95

Site = tuple[str, str, str, int, bool]  # trainer, rule, file, line, reported as a note


@dataclass(frozen=True)
class Score:
    found: frozenset[Site]
    expected: frozenset[Site]

    @property
    def hits(self) -> frozenset[Site]:
        return self.found & self.expected

    @property
    def precision(self) -> float:
        return len(self.hits) / len(self.found) if self.found else 1.0

    @property
    def recall(self) -> float:
        return len(self.hits) / len(self.expected) if self.expected else 1.0


def expected(trainer: Path) -> dict:
    return json.loads((trainer / "expected.json").read_text())


def linted(trainer: Path) -> LintResult:
    """The lint of a corpus trainer, given its command when expected.json names one (as a spec would)."""
    command = expected(trainer).get("command")
    return lint_tree(trainer, commands=[command] if command else [])


def score() -> Score:
    found: set[Site] = set()
    wanted: set[Site] = set()
    for trainer in TRAINERS:
        result = linted(trainer)
        found |= {(trainer.name, f.rule, f.file or "", f.line or 0, False) for f in result.findings}
        found |= {(trainer.name, f.rule, f.file or "", f.line or 0, True) for f in result.advice}
        wanted |= {(trainer.name, h["rule"], h["file"], h["line"], h.get("note", False))
                   for h in expected(trainer)["hazards"]}
    return Score(frozenset(found), frozenset(wanted))


def test_the_corpus_is_large_and_its_lines_are_where_expected_json_says() -> None:
    assert len(TRAINERS) >= 20
    for trainer in TRAINERS:
        doc = expected(trainer)
        for entry in doc["hazards"] + doc["near_misses"]:
            line = (trainer / entry["file"]).read_text().splitlines()[entry["line"] - 1]
            assert line.strip().startswith(entry["text"]), (trainer.name, entry)


def test_precision_and_recall_over_the_corpus() -> None:
    result = score()
    false_alarms = sorted(result.found - result.expected)
    missed = sorted(result.expected - result.found)
    report = f"precision {result.precision:.2f}, recall {result.recall:.2f}\n" \
             f"false alarms: {false_alarms}\nmissed: {missed}"
    assert result.precision >= MIN_PRECISION and result.recall >= MIN_RECALL, report


@pytest.mark.parametrize("trainer", TRAINERS, ids=[t.name for t in TRAINERS])
def test_near_misses_stay_quiet(trainer: Path) -> None:
    result = linted(trainer)
    flagged = {(f.file, f.line) for f in (*result.findings, *result.advice)}
    loud = [m for m in expected(trainer)["near_misses"] if (m["file"], m["line"]) in flagged]
    assert loud == []


@pytest.fixture(scope="module")
def large_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The corpus copied until it is 20,000 lines (bench/check.py --lint-lines times this); (root, copies)."""
    root = tmp_path_factory.mktemp("large")
    copies, lines = 0, 0
    while lines < 20_000:
        for trainer in TRAINERS:
            target = root / f"copy{copies}" / trainer.name
            for source in trainer.rglob("*.py"):
                (target / source.relative_to(trainer)).parent.mkdir(parents=True, exist_ok=True)
                text = source.read_text()
                (target / source.relative_to(trainer)).write_text(text)
                lines += text.count("\n")
        copies += 1
    return root, copies


def test_a_20000_line_code_directory_is_linted_as_its_parts(large_tree: tuple[Path, int]) -> None:
    """Every copy gets the findings its original gets, no more (copies share module names: nothing resolves
    across them wrongly)."""
    root, copies = large_tree
    result = lint_tree(root)
    expected = {(t.name, f.rule, f.file, f.line) for t in TRAINERS for f in lint_tree(t).findings}
    for copy in range(copies):
        found = {(Path(f.file).parts[1], f.rule, Path(*Path(f.file).parts[2:]).as_posix(), f.line)
                 for f in result.findings if Path(f.file).parts[0] == f"copy{copy}"}
        assert found == expected, copy


def test_the_lint_of_a_large_code_directory_runs_no_garbage_collection(large_tree: tuple[Path, int]) -> None:
    """The AST nodes the lint builds all live until it ends: the cyclic collector walking them again after every
    700 allocations was half of its time on 20,000 lines. Paused for the lint, and on again after it."""
    passes: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.collect()  # from zero: no pass is due on the way in
    gc.callbacks.append(count)
    try:
        lint_tree(large_tree[0])
    finally:
        gc.callbacks.remove(count)
    assert len(passes) <= 1  # the one pass Python runs when it is enabled again, for what the lint allocated
    assert gc.isenabled()
