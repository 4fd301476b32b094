"""Incremental, resumable copy of a path on one worker into a local directory (`tpuops pull`).

How: the worker lists the path (`pull_agent.py list`: names, sizes, mtimes, symlinks as links); a file whose local
copy has the same size and mtime is skipped; the others are read in ranged batches (`pull_agent.py read`: many
small files, or one slice of a big one, per command, at most BATCH_BYTES each) and appended to a partial file
beside their final name, renamed over it once complete and given the worker's mtime and mode. A pull cut short
leaves its partial files: the next pull of the same unchanged file continues from where it stopped.

Why ranged batches rather than one tar stream: a Runner hands back a command's stdout as captured bytes or as
text lines, so a whole tar would sit in memory (checkpoints are gigabytes) or need a binary streaming hook in
every runner; batches keep memory bounded, make resuming exact (the partial's size is the next offset) and
still move thousands of small files in one command. Both ends need only Python's standard library.

Every name from the worker is checked before anything is written: absolute names, names with `..`, symlinks
whose target leaves the destination, and writes through a local symlink that leads outside are refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tpuops.remote.base import Runner, RunResult
from tpuops.remote.push_results import PushProgress
from tpuops.shipped import program

BATCH_BYTES = 16 * 1024 * 1024  # per read command: bounds memory, and the work a cut connection loses
BATCH_FILES = 2000
PARTIAL_PREFIX = ".tpuops-partial-"
READ_TIMEOUT = 900.0
PROGRESS_EVERY = 0.1
PULL_AGENT_SOURCE = program("pull_agent")


def agent_command(*args: str) -> list[str]:
    return ["python3", "-S", "-c", PULL_AGENT_SOURCE, *args]


@dataclass(frozen=True)
class RemoteEntry:
    path: str  # relative to the pulled root, "/"-separated ("" is the root itself, when it is a file)
    kind: str  # f | d | l
    size: int
    mtime_ns: int
    mode: int
    link: str | None = None


@dataclass(frozen=True)
class WorkerPull:
    """One worker's part: where it went, what moved, what was refused."""

    worker: str
    dest: str
    files: int = 0
    fetched: int = 0  # files copied (new or changed)
    unchanged: int = 0
    bytes_fetched: int = 0
    refused: tuple[str, ...] = ()  # names that would have left the destination
    error: str | None = None
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and not self.refused

    def as_dict(self) -> dict[str, object]:
        return {"worker": self.worker, "dest": self.dest, "files": self.files, "fetched": self.fetched,
                "unchanged": self.unchanged, "bytes_fetched": self.bytes_fetched, "refused": list(self.refused),
                "error": self.error, "ok": self.ok, "duration": round(self.duration, 3)}


ProgressHandler = Callable[[PushProgress], None]


class PullFailed(Exception):
    """One worker's pull cannot go on (its message names the worker)."""


def unsafe_reason(entry: RemoteEntry) -> str | None:
    """Why this name must not be written under the destination (None: it may)."""
    path = PurePosixPath(entry.path)
    if entry.path.startswith("/") or ".." in path.parts or "\x00" in entry.path or "\\" in entry.path:
        return "its name climbs out of the destination"
    if entry.kind == "l":
        target = entry.link or ""
        if target.startswith("/"):
            return f"a symlink to an absolute path ({target})"
        depth = len(path.parts) - 1  # directories above the link, inside the destination
        for part in PurePosixPath(target).parts:
            depth += -1 if part == ".." else 0 if part == "." else 1
            if depth < 0:
                return f"a symlink pointing outside the destination ({target})"
    return None


def list_remote(runner: Runner, remote: str) -> tuple[str, str, list[RemoteEntry]]:
    """(the root's kind, its base name, its entries), as the worker lists them."""
    result = runner.run(agent_command("list", remote), capture=True, timeout=READ_TIMEOUT)
    if not result.ok:
        raise PullFailed(_failure(result, f"cannot list {remote}"))
    lines = result.stdout.decode("utf-8", "surrogateescape").splitlines()
    try:
        head = json.loads(lines[0])
        entries = [RemoteEntry(e["p"], e["t"], e["s"], e["m"], e["x"], e.get("l"))
                   for e in map(json.loads, lines[1:])]
    except (IndexError, KeyError, ValueError) as err:  # not the pull helper's answer (a shell printing banners?)
        why = f"the worker's answer was not a listing ({type(err).__name__})"
        raise PullFailed(f"{result.worker}: cannot list {remote}: {why}: does python3 start cleanly there "
                         "(`tpuops exec` it with -V)?") from None
    return head["root"], head["name"], entries


def _failure(result: RunResult, doing: str) -> str:
    if result.error:
        return result.error
    return f"{result.worker}: {doing}: {result.program_failure('tpuops-pull', 'pull needs it')}"


@dataclass
class _Job:
    """One file to fetch: where its bytes go until complete, and from which offset."""

    entry: RemoteEntry
    final: Path
    partial: Path
    offset: int


@dataclass
class _Puller:
    runner: Runner
    remote: str
    root: Path  # the destination directory everything must stay inside
    on_progress: ProgressHandler | None
    total: int = 0
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    last_report: float = 0.0

    def report(self, status: str, force: bool = False) -> None:
        now = time.monotonic()
        if self.on_progress is None or not (force or now - self.last_report >= PROGRESS_EVERY):
            return
        self.last_report = now
        self.on_progress(PushProgress(str(self.root), self.runner.name, status, self.done, self.total,
                                      now - self.started))

    def place(self, rel: str) -> Path:
        """The local path for a remote name, refused when a local symlink on the way leads outside."""
        target = self.root.joinpath(*PurePosixPath(rel).parts) if rel else self.root
        parent = target.parent.resolve()
        root = self.root.resolve()
        if parent != root and root not in parent.parents:
            raise PullFailed(f"{self.runner.name}: {rel}: a local symlink on its way leads outside {self.root}")
        return target

    def fetch(self, jobs: list[_Job]) -> None:
        for batch in _batches(jobs):
            wanted = [[job.entry.path, offset, length] for job, offset, length in batch]
            result = self.runner.run(agent_command("read", self.remote), stdin=json.dumps(wanted).encode(),
                                     capture=True, timeout=READ_TIMEOUT)
            if not result.ok:
                raise PullFailed(_failure(result, f"cannot read {self.remote}"))
            for (job, offset, length), data in zip(batch, _frames(result.stdout), strict=True):
                if data is None or len(data) != length:
                    raise PullFailed(f"{self.runner.name}: {job.entry.path} changed or vanished while it was "
                                     "copied (run `tpuops pull` again once it is written)")
                with open(job.partial, "r+b" if offset else "wb") as out:
                    out.truncate(offset)
                    out.seek(offset)
                    out.write(data)
                self.done += length
                if offset + length == job.entry.size:
                    _finish(job)
                self.report("receiving")


def _batches(jobs: list[_Job]) -> Iterator[list[tuple[_Job, int, int]]]:
    """[(job, offset, length)] at most BATCH_BYTES (a big file in several slices) and BATCH_FILES long."""
    batch: list[tuple[_Job, int, int]] = []
    room = BATCH_BYTES
    for job in jobs:
        offset = job.offset
        while True:
            length = min(job.entry.size - offset, room)
            batch.append((job, offset, length))
            offset += length
            room -= length
            if room == 0 or len(batch) >= BATCH_FILES:
                yield batch
                batch, room = [], BATCH_BYTES
            if offset >= job.entry.size:
                break
    if batch:
        yield batch


def _frames(data: bytes) -> Iterator[bytes | None]:
    at = 0
    while at < len(data):
        (count,) = struct.unpack_from(">q", data, at)
        at += 8
        if count < 0:
            yield None
            continue
        yield data[at:at + count]
        at += count


def _finish(job: _Job) -> None:
    os.chmod(job.partial, job.entry.mode & 0o777)
    os.utime(job.partial, ns=(job.entry.mtime_ns, job.entry.mtime_ns))
    if job.final.is_dir() and not job.final.is_symlink():
        raise PullFailed(f"{job.final} is a directory here, a file on the worker (move it away)")
    os.replace(job.partial, job.final)


def partial_name(entry: RemoteEntry) -> str:
    """A partial file's name: the same remote version (name, size, mtime) always gets the same one."""
    key = f"{entry.path}\0{entry.size}\0{entry.mtime_ns}".encode("utf-8", "surrogateescape")
    return PARTIAL_PREFIX + hashlib.sha256(key).hexdigest()[:20]


def unchanged(path: Path, entry: RemoteEntry) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return not path.is_symlink() and path.is_file() and info.st_size == entry.size \
        and info.st_mtime_ns == entry.mtime_ns


def pull_path(runner: Runner, remote: str, dest: Path, on_progress: ProgressHandler | None = None) -> WorkerPull:
    """Copy `remote` (a file or a directory) on one worker into `dest`/BASENAME; never raises for the worker's sake.
    Local files are never deleted; each copied file ends with the worker's mtime and mode bits."""
    started = time.monotonic()
    try:
        return _pull(runner, remote, dest, on_progress, started)
    except PullFailed as err:
        return WorkerPull(runner.name, str(dest), error=str(err), duration=time.monotonic() - started)
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        return WorkerPull(runner.name, str(dest), error=f"{runner.name}: cannot write {where}{err.strerror or err}",
                          duration=time.monotonic() - started)


def _pull(runner: Runner, remote: str, dest: Path, on_progress: ProgressHandler | None,
          started: float) -> WorkerPull:
    kind, name, entries = list_remote(runner, remote)
    if not name or name in (".", ".."):
        raise PullFailed(f"{runner.name}: {remote} names no file or directory of its own; give a path below /")
    top = RemoteEntry(name, "d" if kind == "dir" else "f", 0, 0, 0o755)
    if unsafe_reason(top):
        raise PullFailed(f"{runner.name}: refused {remote}: its name climbs out of the destination")
    dest.mkdir(parents=True, exist_ok=True)
    puller = _Puller(runner, remote, dest, on_progress)
    refused: list[str] = []
    safe: list[tuple[RemoteEntry, str]] = []
    for entry in entries:
        full = f"{name}/{entry.path}" if entry.path else name  # its name under the destination
        reason = unsafe_reason(RemoteEntry(full, entry.kind, entry.size, entry.mtime_ns, entry.mode, entry.link))
        if reason:
            refused.append(f"{full} ({reason})")
        else:
            safe.append((entry, full))
    if kind == "dir":
        puller.place(name).mkdir(exist_ok=True)
    jobs: list[_Job] = []
    kept = 0
    files = 0
    for entry, full in safe:
        target = puller.place(full)
        if entry.kind == "d":
            target.mkdir(exist_ok=True)
        elif entry.kind == "l":
            _link(target, entry.link or "")
        else:
            files += 1
            if unchanged(target, entry):
                kept += 1
                continue
            partial = target.parent / partial_name(entry)
            have = partial.stat().st_size if partial.is_file() else 0
            jobs.append(_Job(entry, target, partial, have if have <= entry.size else 0))
    puller.total = sum(job.entry.size - job.offset for job in jobs)
    puller.report("receiving", force=True)
    puller.fetch([job for job in jobs if job.entry.size > job.offset])
    for job in jobs:
        if job.entry.size == job.offset:  # empty, or complete in an earlier pull that stopped before the rename
            if job.entry.size == 0:
                job.partial.write_bytes(b"")
            _finish(job)
    _sweep_partials({puller.place(full).parent for _, full in safe} | {dest})
    puller.report("received", force=True)
    return WorkerPull(runner.name, str(dest), files, len(jobs), kept, puller.done, tuple(refused),
                      duration=time.monotonic() - started)


def _link(target: Path, link: str) -> None:
    if target.is_symlink() and os.readlink(target) == link:
        return
    if target.exists() and target.is_dir() and not target.is_symlink():
        raise PullFailed(f"{target} is a directory here, a symlink on the worker (move it away)")
    temporary = target.parent / f"{PARTIAL_PREFIX}link-{os.getpid()}"
    if temporary.is_symlink():
        temporary.unlink()
    os.symlink(link, temporary)
    os.replace(temporary, target)


def _sweep_partials(directories: set[Path]) -> None:
    """After a complete pull, partial files of versions that no longer exist on the worker go."""
    for directory in directories:
        for leftover in directory.glob(PARTIAL_PREFIX + "*") if directory.is_dir() else ():
            leftover.unlink(missing_ok=True)
