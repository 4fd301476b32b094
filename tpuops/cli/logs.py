"""`tpuops logs`: TensorBoard scalars from GCS or a directory, as a table, a stream, JSON or a chart."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tpuops.cli.app import JSON_OPTION, PROJECT_OPTION, app, complete_cluster
from tpuops.cli.interrupts import terminated_exit
from tpuops.cli.render import console, fitted_table, print_json_line
from tpuops.errors import TpuopsError, UsageError

if TYPE_CHECKING:  # the readers import protobuf: loaded only when the command runs (fast CLI start)
    from tpuops.logs.events import ScalarPoint
    from tpuops.logs.plot import SeriesBook


@app.command()
def logs(
    name: str | None = typer.Argument(None, metavar="NAME", autocompletion=complete_cluster,
                                      help="Cluster whose spec names the logdir (default: the only one)."),
    logdir: str | None = typer.Option(None, "--logdir", metavar="gs://BUCKET/PATH|DIR",
                                      help="gs://BUCKET/PATH or a directory; no cluster needed."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading: print new points as they arrive."),
    tag: str | None = typer.Option(None, "--tag", metavar="REGEX", help="Only tags matching this regular expression."),
    run: str | None = typer.Option(
        None, "--run", metavar="ID|all",
        help="Which launch of the cluster: its run id (a unique prefix will do) or all; default: the current run "
             "(with the resumes `watch` made). With --logdir: a regular expression over subdirectories."),
    since: int | None = typer.Option(None, "--since", metavar="STEP", help="Only points at this step or later."),
    json_output: bool = JSON_OPTION,
    plot: bool = typer.Option(False, "--plot", help="A terminal chart per tag against step (redrawn with -f)."),
    png: Path | None = typer.Option(None, "--png", metavar="FILE",
                                    help="Also write the chart to this PNG (needs tpuops[png])."),
    download: Path | None = typer.Option(
        None, "--download", metavar="DIR",
        help="Mirror the event files into DIR, incrementally (for a local TensorBoard)."),
    interval: float = typer.Option(2.0, "--interval", min=0.01, metavar="SECONDS",
                                   help="Seconds between polls while data arrives."),
    max_interval: float = typer.Option(30.0, "--max-interval", min=0.01, metavar="SECONDS",
                                       help="Longest wait between idle polls."),
    until_idle: float | None = typer.Option(
        None, "--until-idle", min=0.0, metavar="SECONDS",
        help="With -f: stop once nothing new arrived for this many seconds (e.g. after training ends)."),
    project: str | None = PROJECT_OPTION,
    workers: bool = typer.Option(
        False, "--workers", help="The trainer's own output on every worker instead, prefixed [wN] (-f: follow "
                                 "it to the end of the run; --run ID, or once the TPU is gone: as kept in the "
                                 "bucket)."),
    incidents: bool = typer.Option(
        False, "--incidents", help="The hangs the watchdog captured (stacks, output tails, metrics) and where."),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="With -f on a terminal: every point as a line (as in a pipe) instead of a "
                                       "live progress line per run (step, steps/s, ETA, loss)."),
) -> None:
    """TensorBoard scalars of a cluster's run (or any logdir), read incrementally.

    Default: the latest value, step and time of each run/tag. -f prints the latest point of each series
    (or every point from --since STEP) and then new points as `run tag step value` until Ctrl-C or
    --until-idle; on a terminal, a live progress line per run instead (--verbose: the points). --json prints
    one JSON object per point instead. --workers shows the current run's output on every worker rather than
    scalars.

    \b
    Examples:
      tpuops logs my-bert -f --plot
      tpuops logs --logdir gs://my-bucket/runs/exp1 --tag loss --json
    """
    from tpuops.access.cluster import resolve_logdir
    from tpuops.context import Context
    from tpuops.logs.plot import SeriesBook, png_available
    from tpuops.logs.tail import latest_values
    from tpuops.ops.logs import LogsRequest, follow_points, logs_provider, open_source, read_once, run_map

    if until_idle is not None and not follow:
        raise UsageError("--until-idle only applies with --follow", "add -f")
    if workers:
        _worker_output(name, follow, run)
        return
    if incidents:
        _incidents(name, json_output)
        return
    if png is not None and not png_available():
        raise TpuopsError("--png needs matplotlib", "pip install 'tpuops[png]'")
    ctx = Context.from_env(project=project)
    location = resolve_logdir(ctx, name, logdir)
    runs = run_map(ctx, name, logdir, run)
    request = LogsRequest(logdir=location, tag=tag, run=None if runs else run, since=since, download=download,
                          provider=logs_provider(ctx, name, logdir), runs=runs)
    source = open_source(ctx, request, warn=_warn)
    book = SeriesBook() if (plot or png) else None
    out = _Output(json_output=json_output, plot=plot, png=png, book=book)

    if not follow:
        points = read_once(source, location, runs)
        if not points:
            raise TpuopsError(f"no scalars under {location}" + (" match the filters" if (tag or run or since) else ""),
                              "check --tag/--run/--since; `tpuops logs --logdir DIR` without them shows every tag")
        out.once(points)
        _report_download(source, download)
        return
    from tpuops.cli.progress import TrainingView
    from tpuops.ops.logs import run_totals

    training = TrainingView(totals=run_totals(ctx, name, logdir)) \
        if not (json_output or plot) and TrainingView.wanted(verbose) else None
    try:
        batches = follow_points(source, interval=interval, max_interval=max_interval, until_idle=until_idle,
                                warn=_warn)
        for index, batch in enumerate(batches):
            if training is not None:
                training.points(batch)
                continue
            first_view = batch if (index > 0 or since is not None) else list(latest_values(batch).values())
            out.stream(batch, first_view)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follow normally ends; SIGTERM or SIGHUP end it with their own exit code
    finally:
        if training is not None:
            training.stop()
    _report_download(source, download)
    if terminated_exit() is not None:
        raise typer.Exit(terminated_exit())


def _worker_output(name: str | None, follow: bool, run: str | None) -> None:
    from tpuops.cli.interrupts import ends_cleanly
    from tpuops.cli.launch import follow_interrupted
    from tpuops.cli.remote import LinePrinter
    from tpuops.context import Context
    from tpuops.ops.logs import worker_output

    with ends_cleanly(follow_interrupted):
        code = worker_output(Context.from_env(), name, follow=follow, on_line=LinePrinter(), on_error=_warn,
                             run_id=run)
    if code:
        raise typer.Exit(code)


def _incidents(name: str | None, json_output: bool) -> None:
    from tpuops.context import Context
    from tpuops.watchdog.report import list_incidents

    found = list_incidents(Context.from_env(), name)
    if json_output:
        for incident in found:
            print_json_line(incident.as_dict())
        return
    if not found:
        console.print("no hangs captured for this cluster (`tpuops watch` captures them)")
        return
    for incident in found:
        console.print(f"{incident.at}  {incident.kind:<11} run {incident.run_id}  step {incident.last_step}  "
                      f"odd worker {incident.odd_worker or '-'}  {incident.action}\n"
                      f"    {incident.reason}\n    {incident.url}", markup=False, highlight=False)


class _Output:
    """Renders points as the options ask: chart, JSON lines, text lines or a table; PNG on the side."""

    def __init__(self, *, json_output: bool, plot: bool, png: Path | None, book: SeriesBook | None) -> None:
        self.json_output = json_output
        self.plot = plot
        self.png = png
        self.book = book

    def once(self, points: list[ScalarPoint]) -> None:
        from tpuops.logs.plot import terminal_chart

        self._chart(points)
        if self.plot:
            screen = Screen.of_stdout()
            print(terminal_chart(self.book, screen.columns, None, color=screen.color,  # type: ignore[arg-type]
                                 ascii_only=screen.dumb))
        elif self.json_output:
            for point in points:
                print_json_line(point.to_json())
        else:
            _table(points)

    def stream(self, batch: list[ScalarPoint], shown: list[ScalarPoint]) -> None:
        """`batch` is everything new (charts), `shown` what to print as lines (the first batch is trimmed)."""
        from tpuops.logs.plot import terminal_chart

        self._chart(batch)
        if self.plot:
            screen = Screen.of_stdout()
            prefix = "\x1b[H\x1b[2J" if screen.redraw else ""  # redraw in place on a terminal
            print(prefix + terminal_chart(self.book, screen.columns, screen.lines,  # type: ignore[arg-type]
                                          color=screen.color, ascii_only=screen.dumb), flush=True)
            return
        for point in shown:
            if self.json_output:
                print_json_line(point.to_json())
            else:
                print(f"{point.run} {point.tag} {point.step} {point.value:.6g}")
        sys.stdout.flush()

    def _chart(self, points: list[ScalarPoint]) -> None:
        if self.book is None:
            return
        from tpuops.logs.plot import write_png

        self.book.add(points)
        if self.png is not None:
            write_png(self.book, self.png)


@dataclass(frozen=True)
class Screen:
    """What stdout can show: its size (None in a pipe), colours (not with NO_COLOR or TERM=dumb), redraws."""

    columns: int | None
    lines: int | None
    color: bool
    dumb: bool

    @property
    def redraw(self) -> bool:
        return self.lines is not None and not self.dumb

    @classmethod
    def of_stdout(cls) -> Screen:
        import os
        import shutil

        dumb = os.environ.get("TERM") == "dumb"
        if not sys.stdout.isatty():
            return cls(None, None, color=False, dumb=dumb)
        size = shutil.get_terminal_size()
        return cls(size.columns, size.lines, color=not dumb and not os.environ.get("NO_COLOR"), dumb=dumb)


def _table(points: list[ScalarPoint]) -> None:
    from tpuops.logs.tail import latest_values

    counts: dict[tuple[str, str], int] = {}
    for point in points:
        counts[(point.run, point.tag)] = counts.get((point.run, point.tag), 0) + 1
    rows = []
    for (run, tag), point in sorted(latest_values(points).items()):
        when = datetime.fromtimestamp(point.wall_time, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        rows.append((run, tag, str(point.step), f"{point.value:.6g}", when, str(counts[(run, tag)])))
    # The run id and the time whole, on one line: in 80 columns a long tag is what gets folded. A narrower
    # terminal loses the counts, then the time, then the run when there is one: tags and values stay whole.
    one_run = len({run for run, _ in counts}) == 1
    console.print(fitted_table(console, ("RUN", "TAG", "STEP", "VALUE", "TIME (UTC)", "POINTS"), rows,
                               optional=("POINTS", "TIME (UTC)", *(("RUN",) if one_run else ())),
                               right=("STEP", "VALUE", "POINTS"), one_line=("RUN", "TIME (UTC)"),
                               box=None, pad_edge=False))


def _report_download(source: object, download: Path | None) -> None:
    mirror = getattr(source, "mirror", None)
    if download is not None and mirror is not None:
        print(f"tpuops: mirrored {mirror.total_bytes} bytes of event files into {download}", file=sys.stderr)


def _warn(message: str) -> None:
    print(f"tpuops: warning: {message}", file=sys.stderr, flush=True)
