"""`tpuops logs --plot` as people see it: on an 80x24 terminal (a real pty), in a pipe, with NO_COLOR and
TERM=dumb. A chart is only a chart if its curve spans several rows."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import run_cli, run_on_pty
from tests.logs_writers import TbWriter, simple_event

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CURVE_CHARS = set("▗▖▘▝▀▄▌▐█▙▛▜▟▚▞⣿*•")


def write_falling_loss(logdir: Path, tags: tuple[str, ...] = ("loss", "lr", "eval_loss", "tokens")) -> None:
    writer = TbWriter(logdir / "train")
    for step in range(0, 1000, 10):
        writer.event(simple_event(step, {tag: 4.0 + i - 3.0 * step / 1000 for i, tag in enumerate(tags)}))
    writer.close()


def run_in_pty(args: list[str], columns: int = 80, lines: int = 24, env: dict[str, str] | None = None,
               timeout: float = 60) -> tuple[int, str]:
    """The CLI on a pseudo-terminal of the given size; its whole output and exit code."""
    return run_on_pty(args, columns=columns, lines=lines, env=env, timeout=timeout)


def curve_rows(chart_text: str) -> list[int]:
    """For each chart in the text: how many of its rows carry part of the curve."""
    counts: list[int] = []
    for block in re.split(r"\n\s+step\s*\n", chart_text):
        rows = [re.sub(r"^[\s\d.e+-]*[┤│|+]", "", line) for line in block.splitlines()
                if re.match(r"^[\s\d.e+-]*[┤│|+]", line)]
        drawn = [line for line in rows if CURVE_CHARS & set(line)]
        if rows:
            counts.append(len(drawn))
    return counts


def test_plot_on_an_80x24_terminal_draws_curves_that_fit(tmp_path: Path) -> None:
    write_falling_loss(tmp_path)
    code, output = run_in_pty(["logs", "--logdir", str(tmp_path), "--plot", "-f", "--until-idle", "1",
                               "--interval", "0.05"])
    assert code == 0, output
    frames = [ANSI.sub("", frame) for frame in output.split("\x1b[H\x1b[2J") if frame.strip()]
    assert frames, output
    last = frames[-1].rstrip("\n")
    assert len(last.splitlines()) <= 23, last  # one frame fits the screen with the prompt line
    assert max(len(line) for line in last.splitlines()) <= 80
    assert all(rows >= 4 for rows in curve_rows(last)), last  # falling curves, not a flat smear
    assert "more tags not drawn" in last
    assert "\x1b[3" in output or "\x1b[9" in output  # coloured on a colour terminal


def test_plot_once_on_a_terminal_shows_every_tag(tmp_path: Path) -> None:
    write_falling_loss(tmp_path)
    code, output = run_in_pty(["logs", "--logdir", str(tmp_path), "--plot"])
    assert code == 0, output
    text = ANSI.sub("", output)
    for tag in ("loss", "lr", "eval_loss", "tokens"):
        assert re.search(rf"^\s+{tag} \(run train\)\s*$", text, re.M), text  # one run: named in the title
    assert all(rows >= 4 for rows in curve_rows(text)), text


def test_plot_in_a_pipe_is_80_columns_and_readable(tmp_path: Path) -> None:
    write_falling_loss(tmp_path)
    result = run_cli("logs", "--logdir", str(tmp_path), "--plot", env={"COLUMNS": "", "LINES": ""})
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    counts = curve_rows(result.stdout)
    assert len(counts) == 4 and all(rows >= 4 for rows in counts), result.stdout


def test_no_color_and_dumb_terminals(tmp_path: Path) -> None:
    write_falling_loss(tmp_path, ("loss",))
    code, output = run_in_pty(["logs", "--logdir", str(tmp_path), "--plot"], env={"NO_COLOR": "1"})
    assert code == 0 and "\x1b[3" not in output and "\x1b[9" not in output and "┤" in output
    code, output = run_in_pty(["logs", "--logdir", str(tmp_path), "--plot", "-f", "--until-idle", "1",
                               "--interval", "0.05"], env={"TERM": "dumb"})
    assert code == 0, output
    assert "\x1b[" not in output  # no colours, no screen clearing
    assert output.isascii(), output
    assert all(rows >= 4 for rows in curve_rows(output)), output
