"""Which launch of a cluster wrote an event file, so that `logs` shows one run rather than every run merged.

Trainers write wherever they like: the templates to `$TPUOPS_LOGDIR` (`logs.tensorboard`), others to a path
fixed in their command. Every launch writes new event files, and TensorBoard's writers (TF, PyTorch,
tensorboardX, ours) name each file by the time it was created: `events.out.tfevents.1764091200.host...`.
So a file belongs to the last launch that started before it was created, launches being known by their run
ids, which carry the launch time (`20261125-172000-ab12`, taken on this machine before the trainer starts).
A file under a directory named after a run id (a trainer writing to `$TPUOPS_LOGDIR/$TPUOPS_RUN_ID`) belongs
to that run whatever its time. A worker clock up to `CLOCK_SLACK` seconds behind this machine's is tolerated:
between the run id and the trainer's first event file lie a push, the TPU's release and the trainer's start.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from tpuops.cloud.blob_types import BlobInfo
from tpuops.errors import UsageError
from tpuops.logs.tail import run_of

CLOCK_SLACK = 2.0  # seconds
EARLIER = "(earlier)"  # event files older than every recorded run: shown only with --run all
_CREATED = re.compile(r"tfevents\.(\d{9,11}(?:\.\d+)?)")
_RUN_ID_TIME = re.compile(r"^(\d{8}-\d{6})")


@dataclass(frozen=True)
class Launch:
    id: str
    restart: int  # 0: a fresh start; n: the n-th resume after a preemption (`watch`)


@dataclass(frozen=True)
class RunMap:
    """Assigns event files to launches and keeps those chosen; `label` is the run column's text."""

    launches: tuple[Launch, ...]  # in launch order
    chosen: frozenset[str] | None  # None: every run, and files older than all of them

    def label(self, info: BlobInfo) -> str | None:
        """`RUN_ID` (or `RUN_ID/SUBDIR` for a trainer's own subdirectories); None when the run is not chosen."""
        directory = run_of(info.name)
        first, _, rest = directory.partition("/")
        ids = [launch.id for launch in self.launches]
        if first in ids:
            run, sub = first, rest
        else:
            run, sub = self._by_time(info) or EARLIER, "" if directory == "." else directory
        if self.chosen is not None and run not in self.chosen:
            return None
        return f"{run}/{sub}" if sub else run

    def _by_time(self, info: BlobInfo) -> str | None:
        created = created_at(info)
        if created is None or not self.launches:
            return None
        starts = [launch_time(launch.id) for launch in self.launches]
        index = bisect.bisect_right(starts, created + CLOCK_SLACK) - 1
        return self.launches[index].id if index >= 0 else None


def created_at(info: BlobInfo) -> float | None:
    """When the writer created the file, from its name; else when the store last saw it change."""
    found = _CREATED.search(info.name.rsplit("/", 1)[-1])
    return float(found.group(1)) if found else info.updated


def launch_time(run_id: str) -> float:
    found = _RUN_ID_TIME.match(run_id)
    if not found:
        return float("-inf")  # an id of another shape: counts as older than every launch
    return datetime.strptime(found.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc).timestamp()


def choose(launches: Sequence[Launch], which: str | None, cluster: str) -> RunMap:
    """`--run` for a cluster: None = the current run (with the resumes `watch` made of it), `all`, or an id
    (a unique prefix will do)."""
    ordered = tuple(launches)
    if which == "all":
        return RunMap(ordered, None)
    if which is None:
        fresh = [index for index, launch in enumerate(ordered) if launch.restart == 0]
        start = fresh[-1] if fresh else 0
        return RunMap(ordered, frozenset(launch.id for launch in ordered[start:]))
    matches = [launch.id for launch in ordered if launch.id == which] or \
              [launch.id for launch in ordered if launch.id.startswith(which)]
    if len(matches) != 1:
        known = ", ".join(launch.id for launch in ordered[-5:]) or "none yet"
        problem = "matches several runs" if matches else "is no run"
        raise UsageError(f"--run {which} {problem} of cluster '{cluster}'",
                         f"give a run id ({known}) or --run all")
    return RunMap(ordered, frozenset(matches))
