"""Object storage as tpuops sees it: a flat namespace of blobs under a root, listed and read by byte range.

Two places hold blobs: a GCS bucket prefix (`gs://bucket/prefix`, in `cloud/gcp/gcs_blobs.py`) and a local
directory (`DirBlobStore`, also the local provider's "bucket"). `logs` tails TensorBoard event files through
this interface and `push` uploads data through it, so both work the same on GCS and on a directory.

Names are relative to the store's root and use '/' whatever the OS. CRC32C values are GCS's: the
big-endian CRC32C of the content, base64-encoded.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import google_crc32c

from tpuops.atomic import replacing, write_atomic
from tpuops.cloud.blob_types import BlobInfo, BlobNotFound, BlobStore, PreconditionFailed, VersionedBlob
from tpuops.errors import UsageError

__all__ = ["BlobInfo", "BlobNotFound", "BlobStore", "DirBlobStore", "PreconditionFailed", "VersionedBlob",
           "same_content", "crc32c_of_bytes", "crc32c_of_file"]

CHUNK = 1 << 20
HIDDEN = ".tpuops-"  # upload temporaries, the directory's lock and generation counters: never listed as blobs
LOCK_FILE = HIDDEN + "lock"
GENERATION_PREFIX = HIDDEN + "gen-"


def crc32c_of_bytes(data: bytes) -> str:
    return _encode_crc(google_crc32c.value(data))


def crc32c_of_file(path: str | Path) -> str:
    """The CRC32C of a file in GCS's notation, read in chunks (data files can be large)."""
    checksum = google_crc32c.Checksum()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode("ascii")


def _encode_crc(value: int) -> str:
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def same_content(local_path: str | Path, remote: BlobInfo | None) -> bool:
    """True when `remote` already holds the local file: same size, then same CRC32C (the size check first,
    so an upload decision usually costs no read). Unknown remote CRC counts as different."""
    if remote is None or remote.crc32c is None:
        return False
    if os.path.getsize(local_path) != remote.size:
        return False
    return crc32c_of_file(local_path) == remote.crc32c


class DirBlobStore:
    """A local directory as a blob store. CRC32C is computed only on request and cached by (size, mtime)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._crc_cache: dict[str, tuple[int, int, str]] = {}

    @property
    def url(self) -> str:
        return str(self.root)

    def _path(self, name: str) -> Path:
        parts = [part for part in name.split("/") if part]
        if any(part == ".." for part in parts):
            raise UsageError(f"blob name {name!r} leaves the store's root", "use names relative to the root")
        return self.root.joinpath(*parts)

    def list(self, prefix: str = "", *, checksums: bool = False) -> list[BlobInfo]:
        if not self.root.is_dir():
            return []
        found: list[BlobInfo] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            relative_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            for filename in sorted(filenames):
                name = filename if relative_dir == "." else f"{relative_dir}/{filename}"
                if not name.startswith(prefix) or filename.startswith(HIDDEN):
                    continue
                info = self._info(name, Path(dirpath, filename), checksums)
                if info is not None:
                    found.append(info)
        return found

    def copy_to(self, dest: BlobStore) -> tuple[int, int]:
        """Every blob copied under `dest` (another directory), those it holds already (same size and CRC32C)
        skipped: the local provider's stand-in for a server-side copy between buckets. (objects, bytes)."""
        if not isinstance(dest, DirBlobStore):
            raise UsageError(f"cannot copy {self.url} to {dest.url}", "copy between directories")
        there = {info.name: info for info in dest.list(checksums=True)}
        copied = size = 0
        for info in self.list(checksums=True):
            if (held := there.get(info.name)) is not None and (held.size, held.crc32c) == (info.size, info.crc32c):
                continue
            target = dest._path(info.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            with replacing(target, prefix=HIDDEN + "copy-") as temporary:
                shutil.copyfile(self._path(info.name), temporary)
            copied, size = copied + 1, size + info.size
        return copied, size

    def _info(self, name: str, path: Path, checksums: bool) -> BlobInfo | None:
        try:
            stat = path.stat()
        except FileNotFoundError:  # deleted while we walked
            return None
        crc = self._crc(name, path, stat.st_size, stat.st_mtime_ns) if checksums else None
        return BlobInfo(name=name, size=stat.st_size, crc32c=crc, updated=stat.st_mtime)

    def _crc(self, name: str, path: Path, size: int, mtime_ns: int) -> str | None:
        cached = self._crc_cache.get(name)
        if cached and cached[:2] == (size, mtime_ns):
            return cached[2]
        try:
            crc = crc32c_of_file(path)
        except FileNotFoundError:
            return None
        self._crc_cache[name] = (size, mtime_ns, crc)
        return crc

    def read_range(self, name: str, start: int, end: int) -> bytes:
        try:
            with open(self._path(name), "rb") as handle:
                handle.seek(start)
                return handle.read(max(0, end - start))
        except FileNotFoundError as err:
            raise BlobNotFound(f"{self.url}/{name} not found") from err

    def upload_file(self, local_path: str | Path, name: str) -> BlobInfo:
        target = self._path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._locked(target):
            self._bump_generation(target)
            # Write beside the target, then rename: a reader (or a crash) never sees a half-written blob.
            with replacing(target, suffix="", prefix=HIDDEN + "upload-") as tmp, open(tmp, "wb") as out, \
                    open(local_path, "rb") as source:
                while chunk := source.read(CHUNK):
                    out.write(chunk)
        info = self._info(name, target, checksums=True)
        assert info is not None
        return info

    def delete(self, name: str) -> None:
        target = self._path(name)
        if not target.parent.is_dir():
            return
        with self._locked(target):
            target.unlink(missing_ok=True)
            _generation_file(target).unlink(missing_ok=True)

    # -- compare-and-swap: one lock per directory (flock: between threads and processes), a counter per blob

    def read_versioned(self, name: str) -> VersionedBlob:
        target = self._path(name)
        if not target.parent.is_dir():
            raise BlobNotFound(f"{self.url}/{name} not found")
        with self._locked(target, exclusive=False):
            try:
                data = target.read_bytes()
            except FileNotFoundError as err:
                raise BlobNotFound(f"{self.url}/{name} not found") from err
            return VersionedBlob(data, _generation(target))

    def write_bytes(self, name: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        target = self._path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._locked(target):
            current = _generation(target)
            if if_generation_match is not None and current != if_generation_match:
                raise PreconditionFailed(f"{self.url}/{name} is at generation {current}, not {if_generation_match}",
                                         "someone else wrote it since it was read: read it again")
            # The counter first: a crash between the two leaves the old content under a new generation, which
            # fails a writer holding the old one (safe), never the reverse.
            generation = self._bump_generation(target)
            write_atomic(target, data)
            return generation

    @contextlib.contextmanager
    def _locked(self, target: Path, exclusive: bool = True) -> Iterator[None]:
        with open(target.parent / LOCK_FILE, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @staticmethod
    def _bump_generation(target: Path) -> int:
        """A new generation, above the last one and at least the time in microseconds (as GCS's are), so a
        blob deleted and written again never gets back a generation a stale writer may hold."""
        generation = max(_generation(target) + 1, time.time_ns() // 1000)
        write_atomic(_generation_file(target), str(generation))
        return generation


def _generation_file(target: Path) -> Path:
    return target.parent / f"{GENERATION_PREFIX}{target.name}"


def _generation(target: Path) -> int:
    """The blob's generation; 0 when it does not exist (what `if_generation_match=0` asks for). A blob written
    past the store (a worker's agent) has its modification time in microseconds."""
    try:
        mtime_us = target.stat().st_mtime_ns // 1000
    except FileNotFoundError:
        return 0
    try:
        return int(_generation_file(target).read_text())
    except (FileNotFoundError, ValueError):
        return mtime_us
