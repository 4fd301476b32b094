"""The run decides what the lint could only guess: findings whose lines the preflight never (or rarely) ran in a
step it did run are set aside as notes, notes whose lines ran on most runs of their step become findings. The
counts here are given as a table; tests/test_check_frameworks.py has the same with real trainers on CPU.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from tpuops.check.findings import Finding
from tpuops.check.lines import LineCounts
from tpuops.check.lint import lint_tree
from tpuops.check.run import LastTraceback
from tpuops.check.settle import (
    Anchor,
    as_guess,
    confirm_padding,
    counted_line,
    merge_host_reads,
    ran_a_step,
    settle,
    settle_crash,
)

ITEM = Finding("XLA003", "host-sync", "`.item()` of `loss`", "log it every N steps", "train.py", 12)
# the loop's first statement, line 9, runs once per iteration
LOOP = Anchor(statement_line=12, step_file="train.py", step_line=9, lazy=True, loop=True)


def counts(table: dict[int, int], file: str = "train.py") -> LineCounts:
    return LineCounts({(file, line): count for line, count in table.items()}, processes=1)


def test_a_finding_in_a_step_that_ran_whose_line_never_did_is_set_aside_as_a_note() -> None:
    settled = settle([ITEM], [], {("train.py", "XLA003", 12): LOOP}, counts({9: 20}), steps_ran=20)
    assert settled.findings == () and settled.set_aside == 1
    assert settled.notes[0].message.endswith("(the preflight ran 20 step(s) and its step, never this line)")
    assert "give check.command that configuration" in settled.notes[0].hint
    unknown = settle([ITEM], [], {("train.py", "XLA003", 12): LOOP}, counts({9: 20}), steps_ran=None)
    assert unknown.notes[0].message.endswith("(the preflight ran the trainer and its step, never this line)")


def test_a_finding_in_a_step_the_run_never_reached_says_nothing_of_it() -> None:
    """Another script of the code directory, a mode the preflight did not choose: its findings stay."""
    other = settle([ITEM], [], {("train.py", "XLA003", 12): LOOP}, counts({1: 1}, file="eval.py"), steps_ran=20)
    assert other.findings == (ITEM,) and other.set_aside == 0
    file_rule = replace(ITEM, rule="XLA005")
    anchors = {("train.py", "XLA005", 12): Anchor(statement_line=12)}
    assert settle([file_rule], [], anchors, counts({1: 1}, file="eval.py"), 20).findings == (file_rule,)
    assert settle([file_rule], [], anchors, counts({1: 1}), 20).set_aside == 1  # its file ran, the line not


def test_a_line_run_once_in_a_step_loop_is_not_every_step_but_one_run_every_iteration_is() -> None:
    anchors = {("train.py", "XLA003", 12): LOOP}
    once = settle([ITEM], [], anchors, counts({9: 20, 12: 1}), steps_ran=20)
    assert once.findings == () and "on 1 of 20 iterations of its loop: not every step" in once.notes[0].message
    every = settle([ITEM], [], anchors, counts({9: 20, 12: 20}), steps_ran=20)
    assert every.findings == (ITEM,) and every.set_aside == 0


def test_a_traced_step_runs_its_python_once_so_only_never_counts() -> None:
    traced = Anchor(statement_line=12, step_file="train.py", step_line=5, lazy=False, loop=False)
    settled = settle([ITEM], [], {("train.py", "XLA003", 12): traced}, counts({5: 1, 12: 1}), steps_ran=20)
    assert settled.findings == (ITEM,)


def test_a_note_run_on_most_iterations_of_its_loop_becomes_a_finding_without_the_guess() -> None:
    note = as_guess(ITEM, "loop at line 8 may not run every step")
    assert note.message == "`.item()` of `loss` (a guess: loop at line 8 may not run every step)"
    anchors = {("train.py", "XLA003", 12): replace(LOOP, guess="step")}
    confirmed = settle([], [note], anchors, counts({9: 4, 12: 4}), steps_ran=20)
    assert confirmed.confirmed == 1 and confirmed.notes == ()
    assert confirmed.findings[0].message == "`.item()` of `loss` (the preflight ran it on 4 of 4 iterations of " \
                                            "its loop)"
    assert confirmed.findings[0].hint == ITEM.hint
    two = settle([], [note], anchors, counts({9: 2, 12: 2}), steps_ran=20)  # a loop over two split names
    assert two.findings == () and two.notes == (note,)


def test_a_note_in_a_function_that_ends_a_step_is_a_finding_when_it_runs_on_most_of_its_calls() -> None:
    note = as_guess(ITEM, "train_step may not run every step")
    function = Anchor(statement_line=12, step_file="train.py", step_line=10, lazy=True, loop=False, guess="step")
    settled = settle([], [note], {("train.py", "XLA003", 12): function}, counts({10: 6, 12: 6}), steps_ran=6)
    assert settled.findings[0].message == "`.item()` of `loss` (the preflight ran it on 6 of 6 calls of its function)"


def test_a_note_in_a_file_maybe_imported_is_a_finding_once_its_line_ran() -> None:
    note = as_guess(ITEM, "no script of the command imports train.py by a name the source holds")
    traced = Anchor(statement_line=12, step_file="train.py", step_line=5, guess="reach")
    assert settle([], [note], {("train.py", "XLA003", 12): traced}, counts({5: 1}), steps_ran=20).confirmed == 0
    ran = settle([], [note], {("train.py", "XLA003", 12): traced}, counts({5: 1, 12: 1}), steps_ran=20)
    assert ran.findings[0].message == "`.item()` of `loss` (the preflight ran it 1 time(s))"


def test_a_jax_line_traced_without_an_error_stays_a_note_saying_its_value_is_static() -> None:
    note = as_guess(ITEM, "given a traced value, JAX raises here while tracing the step")
    traced = Anchor(statement_line=12, step_file="train.py", step_line=5, guess="trace")
    settled = settle([], [note], {("train.py", "XLA003", 12): traced}, counts({5: 1, 12: 1}), steps_ran=20)
    assert settled.findings == () and settled.confirmed == 0
    assert settled.notes[0].message.endswith("(the preflight traced it without an error: a static value)")


def test_a_note_on_a_value_taken_for_a_tensor_is_not_settled_by_how_often_its_line_ran() -> None:
    """`if loss > best:` or an f-string of `loss` on every iteration: the count says how often, not whether `loss`
    is a device tensor; only the run's own XLA103 on the line does (merge_host_reads)."""
    note = as_guess(ITEM, "the value is taken for a device tensor by its name and use")
    anchors = {("train.py", "XLA003", 12): replace(LOOP, guess="value")}
    settled = settle([], [note], anchors, counts({9: 20, 12: 20}), steps_ran=20)
    assert settled.findings == () and settled.notes == (note,) and settled.confirmed == 0
    findings, notes, _ = merge_host_reads([], [note], [Finding("XLA103", "host-read", "a read", "hint", "train.py",
                                                               12)])
    assert [f.line for f in findings] == [12] and notes == []


def test_a_padding_note_is_a_finding_when_the_run_recompiled_and_ran_its_line() -> None:
    pad = as_guess(Finding("XLA004", "pad-longest", "padding=True pads each batch to its longest example", "hint",
                           "data.py", 7), "padding to the longest changes the shape only if the lengths differ")
    anchors = {("data.py", "XLA004", 7): Anchor(statement_line=7, guess="data")}
    ran = counts({7: 20}, file="data.py").ran
    assert settle([], [pad], anchors, counts({7: 20}, file="data.py"), 20).notes == (pad,)  # ran: not enough
    storm = [Finding("XLA101", "recompile", "`train_step` compiled 9 times", "hint", "train.py", 3)]
    assert confirm_padding([pad], anchors, ran, []) == ([], [pad])  # no recompilation: the lengths are one
    assert confirm_padding([pad], anchors, counts({}).ran, storm) == ([], [pad])  # the line never ran
    confirmed, left = confirm_padding([pad], anchors, ran, storm)
    assert left == [] and confirmed[0].message == "padding=True pads each batch to its longest example (the " \
        "preflight ran it and compiled the step again for new shapes)"


def test_a_read_in_a_models_forward_is_a_note_the_calls_of_the_forward_settle(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\n"                                      # 1
        "import torch_xla.core.xla_model as xm\n"             # 2
        "\n"                                                  # 3
        "class Net(torch.nn.Module):\n"                       # 4
        "    def forward(self, x):\n"                         # 5
        "        self.seen = x.max().item()\n"                # 6
        "        return x.sum()\n"                            # 7
        "\n"                                                  # 8
        "def train(loader, opt):\n"                           # 9
        "    model = Net()\n"                                 # 10
        "    for batch in loader:\n"                          # 11
        "        model(batch).backward()\n"                   # 12
        "        xm.optimizer_step(opt)\n")                   # 13
    result = lint_tree(tmp_path / "train.py")
    assert result.findings == ()
    assert [(n.line, n.rule) for n in result.advice] == [(6, "XLA003")]
    assert "Net.forward is the model's forward" in result.advice[0].message
    anchor = result.anchors[("train.py", "XLA003", 6)]
    assert anchor == Anchor(6, "train.py", 6, lazy=True, loop=False, guess="step")
    settled = settle([], list(result.advice), result.anchors, counts({6: 5}), steps_ran=5)
    assert settled.findings[0].message.endswith("(the preflight ran it on 5 of 5 calls of its function)")


def test_findings_without_an_anchor_stay_as_they_are() -> None:
    run_level = Finding("XLA103", "host-read", "a read every step", "hint")
    settled = settle([run_level], [], {}, counts({}), steps_ran=20)
    assert settled.findings == (run_level,)


def test_a_read_the_lint_and_the_run_both_see_is_reported_once() -> None:
    """The run's XLA103 at the lint's XLA003 line: the lint's finding with the run's word (a note so seen becomes a
    finding); a read elsewhere and the run's step-level XLA103 stay as they are."""
    note = as_guess(replace(ITEM, line=30), "evaluate may not run every step")
    run = [Finding("XLA103", "host-read", "reading a tensor's value", "hint", "train.py", 12),
           Finding("XLA103", "host-read", "reading a tensor's value", "hint", "train.py", 30),
           Finding("XLA103", "host-read", "reading a tensor's value", "hint", "train.py", 44),
           Finding("XLA103", "host-read", "a read every step", "hint")]
    other = replace(ITEM, line=50)
    findings, notes, left = merge_host_reads([ITEM, other], [note], run)
    assert [(f.line, f.details) for f in findings] == [
        (12, ("the preflight run saw this read cut the XLA graph",)), (50, ()),
        (30, ())]
    assert findings[2].message == "`.item()` of `loss` (the preflight run saw this read cut the XLA graph)"
    assert notes == [] and [f.line for f in left] == [44, None]


def test_the_anchor_of_a_step_loop_and_of_a_function_step(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch_xla.core.xla_model as xm\n"            # 1
        "\n"                                                  # 2
        "def evaluate(model, loader):\n"                      # 3
        "    '''Evaluation.'''\n"                             # 4
        "    for batch in loader:\n"                          # 5
        "        out = model(batch)\n"                        # 6
        "        print(out.item())\n"                         # 7
        "\n"                                                  # 8
        "def train(model, loader, opt):\n"                    # 9
        "    for step, batch in enumerate(loader):\n"         # 10
        "        loss = model(batch)\n"                       # 11
        "        loss.backward()\n"                           # 12
        "        xm.optimizer_step(opt)\n"                    # 13
        "        print(\n"                                    # 14
        "            loss.item())\n"                          # 15
        "    evaluate(model, loader)\n")                      # 16
    result = lint_tree(tmp_path / "train.py")
    assert [(f.line, f.rule) for f in result.findings] == [(15, "XLA003")]
    assert [(n.line, n.rule) for n in result.advice] == [(7, "XLA003")]
    assert result.anchors[("train.py", "XLA003", 15)] == Anchor(14, "train.py", 11, lazy=True, loop=True)
    assert result.anchors[("train.py", "XLA003", 7)] == Anchor(7, "train.py", 6, lazy=True, loop=True, guess="step")
    function = ast.parse((tmp_path / "train.py").read_text()).body[1]
    assert counted_line(function) == 5  # its first statement after the docstring: counted once per call
    assert ran_a_step(result.steps, lambda file, line: line == 11)
    assert not ran_a_step(result.steps, lambda file, line: line in (1, 3, 9, 10))  # imports, defs, a loop's end


def test_the_last_traceback_names_where_the_trainer_failed_in_the_code_directory(tmp_path: Path) -> None:
    traceback = LastTraceback(tmp_path / "code")
    for line in ["Traceback (most recent call last):", f'  File "{tmp_path}/code/old.py", line 3, in <module>',
                 "ValueError: handled", "Traceback (most recent call last):",
                 f'  File "{tmp_path}/code/train.py", line 13, in <module>', "    print(step(x))",
                 '  File "/usr/lib/python3/site-packages/jax/api.py", line 99, in cache_miss',
                 f'  File "{tmp_path}/code/pkg/steps.py", line 7, in step', "TracerBoolConversionError: ..."]:
        traceback.feed(line)
    assert traceback.frames == [("train.py", 13), ("pkg/steps.py", 7)]


def test_a_note_on_the_line_the_run_failed_in_is_a_finding() -> None:
    note = as_guess(ITEM, "given a traced value, JAX raises here while tracing the step")
    anchors = {("train.py", "XLA003", 12): Anchor(statement_line=11, step_file="train.py", step_line=5,
                                                  guess="trace")}
    failed = settle_crash([], [note], anchors, [("train.py", 20), ("train.py", 11)])
    assert failed.confirmed == 1 and failed.findings[0].message == "`.item()` of `loss` (the preflight failed here)"
    elsewhere = settle_crash([], [note], anchors, [("train.py", 20)])
    assert elsewhere.findings == () and elsewhere.notes == (note,)
