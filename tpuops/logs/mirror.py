"""`--download DIR`: mirror a logdir's event files into a local directory, incrementally.

Each sync lists the source once and fetches, per event file, only the bytes beyond the local copy's size,
so it resumes across invocations too; a local TensorBoard can read DIR while it grows. A source file
shorter than its copy was replaced, and is fetched again whole. When mirroring, scalars are read from the
local copy (`MirroredTail`): remote bytes are fetched once, for both purposes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tpuops.cloud.blobs import BlobInfo, BlobNotFound, BlobStore, DirBlobStore
from tpuops.errors import TpuopsError
from tpuops.logs.events import ScalarPoint
from tpuops.logs.tail import READ_CHUNK, Labeler, PollStats, Tail, Warn, compile_filter, is_event_file, run_of

log = logging.getLogger(__name__)


class Mirror:
    def __init__(self, source: BlobStore, dest: str | Path, *, run: str | None = None, warn: Warn | None = None,
                 label: Labeler | None = None, by_run: bool = False):
        self.source = source
        self.dest = Path(dest)
        self._run_re = compile_filter(run, "--run")
        self._label = label  # the cluster's runs (logs/runs.py): only the chosen runs' files are mirrored
        # by_run: each file under DEST/RUN_LABEL/ (TensorBoard then shows the cluster's runs by their ids), rather
        # than where it is in the logdir (launches writing to one directory would show as one run)
        self._by_run = by_run
        self._warn = warn or log.warning
        self.last_bytes = 0
        self.total_bytes = 0

    def relabel(self, label: Labeler | None) -> None:
        """The cluster's runs changed (a launch since): files from now on are placed by the new map."""
        self._label = label

    def sync(self) -> int:
        """Bring every event file up to date; return the bytes fetched. Raises when the listing fails."""
        fetched = 0
        for info in self.source.list(""):
            if is_event_file(info.name) and self._wanted(info):
                fetched += self._sync_file(info)
        self.last_bytes = fetched
        self.total_bytes += fetched
        return fetched

    def _wanted(self, info: BlobInfo) -> bool:
        if self._label is not None:
            return self._label(info) is not None
        return self._run_re is None or self._run_re.search(run_of(info.name)) is not None

    def _sync_file(self, info: BlobInfo) -> int:
        if self._by_run and self._label is not None:
            place = f"{self._label(info)}/{info.name.rsplit('/', 1)[-1]}"
        else:
            place = info.name
        target = self.dest.joinpath(*place.split("/"))
        have = target.stat().st_size if target.exists() else 0
        if info.size < have:
            self._warn(f"{self.source.url}/{info.name} is shorter than its copy (replaced?): fetching it again")
            have = 0
        if info.size == have:
            return 0
        fetched = 0
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "r+b" if have else "wb") as out:
            out.truncate(have)
            out.seek(have)
            while have < info.size:  # bounded range reads, appended as they come
                try:
                    data = self.source.read_range(info.name, have, min(info.size, have + READ_CHUNK))
                except BlobNotFound:
                    break  # deleted since the listing; the copy stays for TensorBoard
                except (TpuopsError, OSError) as err:
                    self._warn(f"could not fetch {self.source.url}/{info.name}: {err}; will retry")
                    break
                if not data:
                    break
                out.write(data)
                have += len(data)
                fetched += len(data)
        if info.updated is not None:  # the copy keeps the source's time: logs/runs.py may go by it
            os.utime(target, (info.updated, info.updated))
        return fetched


class MirroredTail:
    """Mirror, then tail the local copy: a Pollable for `follow` whose `last.bytes_read` is remote bytes."""

    def __init__(self, mirror: Mirror, *, tag: str | None = None, run: str | None = None,
                 since: int | None = None, warn: Warn | None = None, label: Labeler | None = None) -> None:
        self.mirror = mirror
        self.local = Tail(DirBlobStore(mirror.dest), tag=tag, run=run, since=since, warn=warn, label=label)
        self.last = PollStats(files=0, bytes_read=0, points=0)

    def poll(self) -> list[ScalarPoint]:
        fetched = self.mirror.sync()
        points = self.local.poll()
        self.last = PollStats(files=self.local.last.files, bytes_read=fetched, points=len(points))
        return points
