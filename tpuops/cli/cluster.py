"""`tpuops up`, `status`, `down`: parse, call one ops function, render."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

import typer

from tpuops.cli.app import JSON_OPTION, PROJECT_OPTION, YES_OPTION, app
from tpuops.cli.render import console, err_console, print_json
from tpuops.durations import parse_duration
from tpuops.errors import UsageError

INTERRUPTED_EXIT = 130


class ProgressView:
    """Each resource's latest state: a live table on a terminal, one line per change otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.rows: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()
        self.live = None

    def update(self, kind: str, name: str, text: str) -> None:
        if not self.enabled:
            return
        with self.lock:
            self.rows[(kind, name)] = text
            if self.live is not None:
                self.live.update(self.table())
            else:
                err_console.print(f"  {kind} {name}: {text}")

    def table(self):  # noqa: ANN201  rich Table
        from rich.table import Table

        table = Table(show_header=True, header_style="bold", box=None)
        for column in ("resource", "name", "state"):
            table.add_column(column)
        for (kind, name), text in self.rows.items():
            table.add_row(kind, name, text)
        return table

    @contextmanager
    def shown(self) -> Iterator[ProgressView]:
        if not (self.enabled and err_console.is_terminal):
            yield self
            return
        from rich.live import Live

        with Live(self.table(), console=err_console, refresh_per_second=8, transient=False) as live:
            self.live = live
            try:
                yield self
            finally:
                self.live = None


@app.command()
def up(
    spec: str = typer.Argument(..., help="The spec file."),
    wait_for_capacity: str = typer.Option(
        "0", "--wait-for-capacity", help="Keep retrying (and trying tpu.zones) this long when a zone has no capacity."
    ),
    json_output: bool = JSON_OPTION,
    yes: bool = YES_OPTION,
    project: str = PROJECT_OPTION,
) -> None:
    """Create or adopt everything the spec asks for (idempotent, resumable)."""
    from tpuops.context import Context
    from tpuops.ops.up import up as run_up

    ctx = Context.from_env(project=project, assume_yes=yes)
    seconds = parse_duration(wait_for_capacity)
    view = ProgressView(enabled=not json_output)
    try:
        with view.shown():
            result = run_up(ctx, spec, wait_for_capacity=seconds, progress=view.update)
    except KeyboardInterrupt:
        # State is saved before every create; leave at once (worker threads would block a normal exit).
        print(
            "tpuops: interrupted: what was started is recorded; run `tpuops up` again to resume, "
            "or `tpuops down` to delete it",
            file=sys.stderr,
            flush=True,
        )
        os._exit(INTERRUPTED_EXIT)
    if json_output:
        print_json(
            {
                "cluster": result.cluster,
                "created": [asdict(a) for a in result.done],
                "kept": [asdict(a) for a in result.plan.actions if a.verb == "keep"],
                "workers": [w.model_dump() for w in result.workers],
                "known_hosts": result.known_hosts,
                "warnings": list(result.plan.warnings),
            }
        )
        return
    for warning in result.plan.warnings:
        err_console.print(f"warning: {warning}")
    if result.created_nothing:
        console.print(f"{result.cluster}: nothing to do, all {len(result.plan.actions)} resources exist")
    else:
        done = ", ".join(f"{a.verb}d {a.kind} {a.name}" for a in result.done)
        console.print(f"{result.cluster}: {done}")
    for worker in result.workers:
        console.print(
            f"  worker {worker.index}: internal {worker.internal_ip}, external {worker.external_ip or '-'}, "
            f"ssh {worker.ssh_host}:{worker.ssh_port}"
        )


@app.command()
def status(
    name: str = typer.Argument(None, help="Cluster name; without it, every cluster with local state."),
    json_output: bool = JSON_OPTION,
    project: str = PROJECT_OPTION,
) -> None:
    """Resources and their live state, the TPU's state and health, workers and their IPs."""
    from tpuops.context import Context
    from tpuops.ops import status as ops_status

    ctx = Context.from_env(project=project)
    if name is None:
        clusters = ops_status.list_clusters(ctx)
        if json_output:
            print_json([asdict(c) for c in clusters])
        elif not clusters:
            console.print("no clusters here (create one with `tpuops up SPEC`)")
        for cluster in [] if json_output else clusters:
            console.print(f"{cluster.name}  {cluster.provider}  {cluster.zone or '-'}  {cluster.workers} worker(s)")
            for resource in cluster.resources:
                console.print(f"  {resource}")
        return
    result = ops_status.cluster_status(ctx, name)
    if json_output:
        data = asdict(result)
        data["workers"] = [w.model_dump() for w in result.workers]
        print_json(data)
        return
    console.print(f"{result.name}  {result.provider}  project {result.project or '-'}  zone {result.zone or '-'}")
    for row in result.resources:
        console.print(f"  {row.kind:<16} {row.name:<28} {row.state:<12} {row.detail}")
    if result.tpu_state:
        console.print(f"  TPU: {result.tpu_state}, health {result.tpu_health or '-'}")
    if result.restarts:
        console.print(f"  restarts: {len(result.restarts)} (by `tpuops watch`)")
        for restart in result.restarts:
            console.print(f"    {restart.at}  {restart.message}")
    for worker in result.workers:
        console.print(f"  worker {worker.index}: internal {worker.internal_ip}, external {worker.external_ip or '-'}")
    if result.run:
        run = result.run
        when = "now" if run.live else "as last recorded"
        console.print(f"  run {run.id} (started {run.started_at}, restart {run.restart}): {run.command}", markup=False)
        for worker, worker_state in run.workers.items():
            console.print(f"    {worker}: {worker_state} ({when})")


@app.command()
def down(
    name: str = typer.Argument(..., help="Cluster name, or its spec file (to search by label when state is lost)."),
    yes: bool = YES_OPTION,
    delete_bucket: bool = typer.Option(False, "--delete-bucket", help="Also delete the bucket."),
    force: bool = typer.Option(False, "--force", help="With --delete-bucket: delete it even if it holds objects."),
    json_output: bool = JSON_OPTION,
    project: str = PROJECT_OPTION,
) -> None:
    """Delete everything tpuops created for a cluster (the bucket only with --delete-bucket)."""
    from tpuops.context import Context
    from tpuops.ops import down as ops_down

    ctx = Context.from_env(project=project, assume_yes=yes)
    plan, cloud = ops_down.find(ctx, name, delete_bucket=delete_bucket, force=force)
    for item in plan.left_alone:
        err_console.print(f"warning: left alone: {item}")
    if plan.doomed and not yes:
        listing = ", ".join(f"{d.kind} {d.name}" for d in plan.doomed)
        if not sys.stdin.isatty():
            raise UsageError(f"would delete {listing}", "pass --yes to confirm when not on a terminal")
        typer.confirm(f"Delete {listing}?", abort=True)
    view = ProgressView(enabled=not json_output)
    result = ops_down.execute(ctx, plan, cloud, progress=view.update)
    if json_output:
        print_json({**asdict(result), "nothing_left": result.nothing_left, "searched": plan.searched})
        return
    if result.nothing_left:
        note = "" if plan.searched else " (no local state: pass the spec file to search by label)"
        console.print(f"{result.cluster}: nothing was left to delete{note}")
    else:
        console.print(f"{result.cluster}: deleted " + ", ".join(f"{d.kind} {d.name}" for d in result.deleted))
    if result.kept_bucket:
        console.print(f"  bucket gs://{result.kept_bucket} kept (pass --delete-bucket to delete it)")
