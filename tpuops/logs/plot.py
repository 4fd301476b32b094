"""Charts of scalars against step: in the terminal (plotext) and as a PNG (matplotlib, the `png` extra).

One chart per tag (loss and learning rate do not share a scale), one line per run. Both renderers are
imported inside functions: most `logs` invocations draw nothing.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

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


def terminal_chart(book: SeriesBook, width: int = 100, height: int | None = None, color: bool = False) -> str:
    """The charts as text (plotext 6), stacked; a note names how many tags were left out."""
    import plotext

    tags, left_out = book.shown_tags()
    if not tags:
        return "no scalars to plot"
    figure = plotext.figure
    figure.clear()
    if len(tags) > 1:
        figure.subplots(len(tags), 1)  # plotext keeps no grid for 1x1: a single chart is the figure itself
    for row, tag in enumerate(tags, start=1):
        chart = figure.subplot(row, 1) if len(tags) > 1 else figure
        chart.title(tag)
        for run, (steps, values) in sorted(book.series[tag].items()):
            chart.draw(chart.signal(steps, values).lines().label(run))
        chart.label("step")
    figure.plot_size(width, height or 14 * len(tags))
    text = figure.build().string(colorless=not color)
    figure.clear()
    if left_out:
        text += f"\n({left_out} more tags not drawn: narrow the choice with --tag REGEX)"
    return text


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
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=".tpuops-", suffix=".png")
    os.close(fd)
    try:
        figure.savefig(tmp, format="png", dpi=100)
        os.replace(tmp, path)
    finally:
        pyplot.close(figure)
        Path(tmp).unlink(missing_ok=True)


def png_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
