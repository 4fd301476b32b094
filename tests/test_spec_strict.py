"""The spec is strict: a YAML boolean is not a number, a number is not a boolean nor text, nothing is empty that
must run, nothing is pushed from / or $HOME, and aliases cannot make a ten-line file take minutes to read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tpuops.errors import SpecError
from tpuops.ops.specs import check_spec_file

BASE = """\
name: strict
provider: local
tpu:
  type: v2-8
trainer:
  framework: jax
  command: python3 train.py
"""


def error_for(tmp_path: Path, text: str) -> SpecError:
    (tmp_path / "project").mkdir(exist_ok=True)
    path = tmp_path / "project" / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        check_spec_file(path)
    return caught.value


def with_line(key_line: str, after: str = "  type: v2-8\n") -> str:
    return BASE.replace(after, after + key_line + "\n")


@pytest.mark.parametrize(("text", "line", "field", "words"), [
    # integers: a YAML boolean (true, yes, on) is not a number, nor is quoted text or a fraction
    (with_line("  slices: true"), 5, "tpu.slices", "expected a whole number, got true (YAML reads it as a boolean)"),
    (with_line("  slices: yes"), 5, "tpu.slices", "got yes (YAML reads it as a boolean)"),
    (with_line("  slices: on"), 5, "tpu.slices", "got on (YAML reads it as a boolean)"),
    (with_line("  workers: '2'"), 5, "tpu.workers", "expected a whole number, got '2' (YAML reads it as text)"),
    (BASE + "ssh: {port: true}\n", 8, "ssh.port", "expected a whole number, got true"),
    (BASE + "client_vm: {disk_gb: 50.5}\n", 8, "client_vm.disk_gb", "expected a whole number, got 50.5"),
    # booleans: a number is not a boolean, nor is text
    (with_line("  preemptible: 1"), 5, "tpu.preemptible", "expected a boolean (true or false), got 1"),
    (with_line("  spot: 0"), 5, "tpu.spot", "expected a boolean (true or false), got 0"),
    (with_line("  queued: 'yes'"), 5, "tpu.queued", "expected a boolean (true or false), got 'yes'"),
    # numbers
    (BASE + "autostop: {max_hours: yes}\n", 8, "autostop.max_hours", "expected a number, got yes"),
    (BASE + "autostop: {max_hours: '2'}\n", 8, "autostop.max_hours", "expected a number, got '2'"),
    # text that YAML reads as a number or a boolean: refused with the value as written, to be quoted
    (with_line("  runtime: 1.10"), 5, "tpu.runtime", "expected text, got 1.10 (YAML reads it as a number)"),
    (BASE + "  env: {STEPS: 0100}\n", 8, "trainer.env.STEPS", "expected text, got 0100"),
    (BASE + "labels: {team: no}\n", 8, "labels.team", "expected text, got no (YAML reads it as a boolean)"),
    (with_line("  zones: [1]"), 5, "tpu.zones.0", "expected text, got 1 (YAML reads it as a number)"),
])
def test_a_value_of_the_wrong_kind_names_file_line_and_field(tmp_path: Path, text: str, line: int, field: str,
                                                             words: str) -> None:
    error = error_for(tmp_path, text)
    assert (error.line, error.field) == (line, field)
    assert words in error.message
    assert error.hint and "\n" not in str(error)


def test_text_read_as_a_number_is_told_to_quote_it_as_written(tmp_path: Path) -> None:
    error = error_for(tmp_path, with_line("  runtime: 1.10"))
    assert error.hint == "quote it to keep it as written: runtime: '1.10'"


@pytest.mark.parametrize("autostop", ["{idle: 30m}", "{idle: off}", "{max_hours: 12}",
                                      "{idle: 90s, max_hours: 1.5}"])
def test_durations_and_whole_hours_stay_accepted(tmp_path: Path, autostop: str) -> None:
    (tmp_path / "project").mkdir()
    path = tmp_path / "project" / "spec.yaml"
    path.write_text(BASE + f"autostop: {autostop}\nssh: {{port: 2222}}\n")
    spec = check_spec_file(path).spec
    assert spec.ssh.port == 2222


def test_cli_refuses_slices_true_in_one_line(tmp_path: Path) -> None:
    path = write_spec(tmp_path, with_line("  slices: true"))
    result = run_cli("plan", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"tpuops: error: {path}:5: tpu.slices: expected a whole number, got true (YAML reads it as a boolean) "
        "(hint: true, yes and on are booleans in YAML, not numbers: write the number)"]


@pytest.mark.parametrize("command", ["''", "'   '"])
def test_an_empty_trainer_command_is_refused(tmp_path: Path, command: str) -> None:
    error = error_for(tmp_path, BASE.replace("command: python3 train.py", f"command: {command}"))
    assert (error.line, error.field) == (7, "trainer.command")
    assert "empty" in error.message


def test_code_path_root_or_home_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    error = error_for(tmp_path, BASE + "code: {path: /}\n")
    assert (error.line, error.field) == (8, "code.path")
    assert "the root directory /" in error.message
    monkeypatch.setenv("HOME", str(tmp_path))
    error = error_for(tmp_path, BASE + "code: {path: ..}\n")
    assert f"your home directory {tmp_path.resolve()}" in error.message
    error = error_for(tmp_path, BASE + "code: {path: '~'}\n")
    assert "home directory" in error.message


def test_a_code_path_inside_home_is_fine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "project").mkdir()
    path = tmp_path / "project" / "spec.yaml"
    path.write_text(BASE)
    assert check_spec_file(path).spec.code.path == "."


BOMB = BASE + "".join(
    f"x{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9 if level else ['lol'] * 9)}]\n" for level in range(12)
)


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    path = write_spec(tmp_path, BOMB)
    result = run_cli("plan", str(path), timeout=30)  # 9**12 values: unguarded, this runs for hours
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert "YAML aliases expand to more than 10,000 values" in line and f"{path}:" in line


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    error = error_for(tmp_path, BASE + "labels: &x {a: *x}\n")
    assert "refers to the value that contains it" in error.message and error.line == 8


def test_ordinary_aliases_still_work(tmp_path: Path) -> None:
    text = BASE.replace("  command: python3 train.py", "  command: &cmd python3 train.py\n  setup: *cmd")
    (tmp_path / "project").mkdir()
    path = tmp_path / "project" / "spec.yaml"
    path.write_text(text)
    spec = check_spec_file(path).spec
    assert spec.trainer is not None and spec.trainer.setup == spec.trainer.command


def test_the_guard_and_watch_sections_are_strict_too(tmp_path: Path) -> None:
    for section in ("guard: {enabled: 1}", "watch: {watchdog: 'yes'}"):
        done = run_cli("plan", str(write_spec(tmp_path, BASE + section + "\n")))
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (section, done.stderr)
