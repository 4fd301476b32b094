"""`tpuops check` of every shipped example spec passes on a small machine (2 cores, 24 GB): the templates shrink
to a toy configuration of the same structure under TPUOPS_PREFLIGHT=1, so a v4-32 or BERT-base configuration
runs its real step code here in seconds, with no finding, an honest step count and its step compiled once or
twice, not again and again. Every template is behind one of them, so this is also the templates' check.

Heavy: each example skips when its framework is not installed. A few steps each: the compilations dominate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import require_module, run_cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
NEEDS = {"tensorflow": "tensorflow", "pytorch": "torch_xla", "jax": "jax"}
STEPS = 4


def framework_of(spec: Path) -> str:
    text = spec.read_text()
    return next(name for name in NEEDS if f"framework: {name}" in text)


@pytest.mark.heavy
@pytest.mark.parametrize("spec", EXAMPLES, ids=[s.stem for s in EXAMPLES])
def test_every_shipped_example_passes_check_here(spec: Path) -> None:
    framework = framework_of(spec)
    if "charlm" not in spec.read_text():  # the quickstart's trainer is numpy
        require_module(NEEDS[framework])
    result = run_cli("check", str(spec), "--steps", str(STEPS), "--timeout", "4m", "--json", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    run = report["run"]
    assert report["findings"] == [] and run["exit_code"] == 0 and not run["timed_out"]
    assert not run["ignored_max_steps"], report["notes"]
    assert run["steps_ran"] in (None, STEPS), run
    if "charlm" not in spec.read_text():
        assert 1 <= run["compilations"] <= 3, run  # the step compiled (and not again and again)
