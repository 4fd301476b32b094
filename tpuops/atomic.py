"""Atomic file replacement: write beside the target, then rename over it, so a reader (or a crash) sees the
old content or the new, never half a file. (The worker agents keep their own copy: they ship stdlib-only.)"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | Path, suffix: str = ".tmp", prefix: str | None = None) -> Iterator[Path]:
    """A fresh temporary path in `path`'s directory; renamed over `path` when the block ends without error,
    removed otherwise. Unique per call, so concurrent writers never share a temporary file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=prefix or f".{path.name}.",
                               suffix=suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes, *, fsync: bool = False) -> None:
    """Replace `path`'s content with `data` in one step; `fsync` also survives a power loss (the state file).
    A failed write names `path` (a full disk's ENOSPC from write() names no file)."""
    try:
        with replacing(path) as tmp, open(tmp, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from err
