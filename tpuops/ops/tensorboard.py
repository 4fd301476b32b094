"""`tpuops tensorboard`: a local TensorBoard on a cluster's runs, fed by an incremental mirror of its logdir that a
thread keeps current while TensorBoard runs (`logs/board.py`), as `logs --download` mirrors it once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpuops.access.cluster import held_logdir, resolve_name
from tpuops.access.guard_state import with_guard_state
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.logs.board import Board, MirrorLoop, port_taken
from tpuops.logs.mirror import Mirror
from tpuops.ops.logs import ClusterRuns, run_map

DEFAULT_PORT = 6006
DEFAULT_HOST = "127.0.0.1"  # this machine only: the event files may say more than the user wants to publish
MIRROR_DIR = "tensorboard"  # in the cluster's state folder, kept between sessions so a restart fetches only news


@dataclass(frozen=True)
class BoardInfo:
    cluster: str
    url: str
    logdir: str  # where the trainer writes (gs://... or a directory)
    mirror: str  # the local copy TensorBoard reads
    runs: str  # which of the cluster's runs: "all" or their ids

    def as_dict(self) -> dict[str, object]:
        return dict(vars(self))


def tensorboard(
    ctx: Context,
    name: str | None,
    *,
    port: int = DEFAULT_PORT,
    host: str = DEFAULT_HOST,
    run: str | None = None,
    interval: float = 5.0,
    warn: Callable[[str], None],
    on_ready: Callable[[BoardInfo], None],
) -> int | None:
    """Mirror the logdir (every run of the cluster, each as its own TensorBoard run named by its id; `run`: only
    those), start TensorBoard on it, keep mirroring every `interval` seconds until TensorBoard exits or the caller
    is interrupted (KeyboardInterrupt goes on up); TensorBoard and the mirror thread are stopped either way.
    Returns TensorBoard's exit code when it ended by itself."""
    if not 0 <= port < 65536:
        raise UsageError(f"--port {port} is not a port number",
                         "give one from 1 to 65535, e.g. --port 6007, or 0 for any free one")
    cluster = resolve_name(ctx, name)
    # Read once: the logdir, the runs and the provider all come from this copy (with what a guard VM changed).
    read_at = time.time()
    state = with_guard_state(ctx, ctx.store.require(cluster))
    location = held_logdir(state)
    runs = ClusterRuns(ctx, cluster, run or "all", held=state, read_at=read_at)
    if port and port_taken(host, port):
        raise UsageError(f"port {port} on {host} is in use (another TensorBoard?)", "choose another with --port N")
    provider = ctx.provider_for(state=state)
    chosen = "all" if runs is None or runs.chosen is None else ",".join(sorted(runs.chosen))
    dest = ctx.store.cluster_dir(cluster) / MIRROR_DIR / chosen.replace(",", "+")
    mirror = Mirror(provider.blob_store(location), dest, warn=warn, label=runs.label if runs else None, by_run=True)
    dest.mkdir(parents=True, exist_ok=True)
    mirror.sync()  # first, in this thread: an unreadable logdir fails here, before anything is started
    board = Board(Path(dest), host, port)

    def learn_new_runs() -> None:  # with every run (the default), a launch since shows as a run of its own
        if chosen == "all":
            latest = run_map(ctx, cluster, None, "all")
            mirror.relabel(latest.label if latest else None)

    loop = MirrorLoop(mirror, interval, warn, before_sync=learn_new_runs)
    board.start()
    try:
        board.wait_ready()
        loop.start()
        on_ready(BoardInfo(cluster, board.url, location, str(dest), chosen))
        return board.wait()
    finally:
        loop.stop()
        board.stop()
