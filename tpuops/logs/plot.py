"""Charts of scalars against step: in the terminal (plotext) and as a PNG (matplotlib, the `png` extra).

One chart per tag (loss and learning rate do not share a scale), one line per run. Both renderers are
imported inside functions: most `logs` invocations draw nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from tpuops.atomic import replacing
from tpuops.errors import TpuopsError
from tpuops.logs.events import ScalarPoint

MAX_CHARTS = 6  # beyond this a terminal chart is unreadable; --tag narrows the choice

Series = dict[str, dict[str, tuple[list[int], list[float]]]]  # tag -> run -> (steps, values)


class SeriesBook:
    """Points gathered per tag and run, in arrival order, for redrawing while following."""

    def __init__(self) -> None:
        self.series: Series = defaultdict(lambda: defaultdict(lambda: ([], [])))

    def add(self, points: Iterable[ScalarPoint]) -> None:
        for point in points:
            steps, values = self.series[point.tag][point.run]
            steps.append(point.step)
            values.append(point.value)

    @property
    def tags(self) -> list[str]:
        return sorted(self.series)

    def shown_tags(self) -> tuple[list[str], int]:
        """The tags drawn, and how many were left out."""
        tags = self.tags
        return tags[:MAX_CHARTS], max(0, len(tags) - MAX_CHARTS)


CHART_FRAME_ROWS = 5  # title, top and bottom border, tick labels, axis label
MIN_PLOT_ROWS = 6  # fewer rows than this draw a flat smear, not a curve
PIPE_SIZE = (80, 14 + CHART_FRAME_ROWS)  # width and rows per chart when nobody's terminal sets them


def chart_layout(tags: int, columns: int | None, lines: int | None) -> tuple[int, int, int]:
    """(width, rows per chart, charts shown) for a screen of `columns` x `lines`; lines None: as many rows as
    the charts need (a pipe, or a one-off print the user scrolls through).

    On a screen every chart gets at least MIN_PLOT_ROWS rows of curve: when all the tags do not fit, fewer
    charts are drawn (the note names the rest) rather than all of them squashed flat.
    """
    if lines is None:
        return max(40, columns or PIPE_SIZE[0]), PIPE_SIZE[1], tags
    smallest = MIN_PLOT_ROWS + CHART_FRAME_ROWS
    usable = max(smallest, lines - 2)  # the prompt line and the note
    shown = max(1, min(tags, usable // smallest))
    return max(40, columns), min(PIPE_SIZE[1], usable // shown), shown


def terminal_chart(book: SeriesBook, columns: int | None = None, lines: int | None = None,
                   color: bool = False, ascii_only: bool = False) -> str:
    """The charts as text (plotext 6), stacked, sized for a `columns` x `lines` screen or a pipe (None);
    a note names the tags left out. `ascii_only` (TERM=dumb) draws with plain characters."""
    import plotext

    all_tags, left_out = book.shown_tags()
    if not all_tags:
        return "no scalars to plot"
    width, rows, shown = chart_layout(len(all_tags), columns, lines)
    tags, left_out = all_tags[:shown], left_out + len(all_tags) - shown
    plotext.terminal.limit(False, False)  # our size, not the size plotext guesses for its own terminal
    figure = plotext.figure
    figure.clear()
    if len(tags) > 1:
        figure.subplots(len(tags), 1)  # plotext keeps no grid for 1x1: a single chart is the figure itself
    for row, tag in enumerate(tags, start=1):
        chart = figure.subplot(row, 1) if len(tags) > 1 else figure
        runs = sorted(book.series[tag].items())
        lone = runs[0][0] if len(runs) == 1 and runs[0][0] != "." else None
        chart.title(f"{tag} (run {lone})" if lone else tag)  # several runs: the legend names them
        for run, (steps, values) in runs:
            signal = chart.signal(steps, values, marker="*" if ascii_only else None).lines()
            chart.draw(signal.label(run or ".") if len(runs) > 1 else signal)  # one run: no legend box
        chart.label("step")
    figure.plot_size(width, rows * len(tags))
    text = figure.build().string(colorless=not color).rstrip("\n")
    figure.clear()
    if ascii_only:
        text = text.translate(ASCII_FRAME)
    if left_out:
        text += f"\n({left_out} more tags not drawn: narrow the choice with --tag REGEX or a taller screen)"
    return text


ASCII_FRAME = str.maketrans({"─": "-", "│": "|", "┌": "+", "┐": "+", "└": "+", "┘": "+", "┬": "+", "┴": "+",
                             "┤": "+", "├": "+", "┼": "+"})


def write_png(book: SeriesBook, path: str | Path) -> None:
    """The same charts as a PNG, written atomically (a viewer never opens half a file)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as pyplot
    except ImportError as err:
        raise TpuopsError("--png needs matplotlib", "pip install 'tpuops[png]'") from err
    tags, _ = book.shown_tags()
    figure, axes = pyplot.subplots(max(1, len(tags)), 1, figsize=(10, 3 * max(1, len(tags))), squeeze=False)
    for axis, tag in zip(axes[:, 0], tags, strict=True):
        for run, (steps, values) in sorted(book.series[tag].items()):
            axis.plot(steps, values, label=run, linewidth=1)
        axis.set_title(tag)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        axis.legend(loc="best", fontsize="small")
    figure.tight_layout()
    path = Path(path)
    try:
        with replacing(path, suffix=".png") as tmp:
            figure.savefig(tmp, format="png", dpi=100)
    finally:
        pyplot.close(figure)


def png_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
