"""The payload of a push, built while it is sent: nothing is written on this machine, so nothing can be left
behind by an interrupted push, and no temporary tar is written, read back and hashed.

The payload is a tar: delta.json first (what the worker needs besides file bodies), then files/<path> for each
new or changed file. Over a real network it is a series of gzip members, deflated at level 1 where that pays
(source, text) and stored where it does not (shards, checkpoints, archives); the worker's `tar` reads such a
series as one archive. Over loopback or a pipe on this machine compression costs more than it saves, so the
tar goes as it is.

On an agent's stdin the payload follows one line, `TPUOPS-STREAM tar|gzip raw|framed`: raw, it runs to the end
of stdin; framed (for the relay's seed, whose stdin stays open after it), it comes in chunks each after its
length in hex on a line of its own, then `0 SIZE` (see push_receive.receive_stdin). The relay serves the bare
payload, whose size and sha256 are known by then.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tpuops.remote.manifest import FileEntry, Manifest, changed_entries, manifest_delta

CHUNK = 1024 * 1024
BLOCK = tarfile.BLOCKSIZE
# A file compresses when level 1 shrinks a sample of it by a fifth; smaller files are taken as text.
SAMPLE = 64 * 1024
WORTH_COMPRESSING = 0.8

ProgressHandler = Callable[[int], None]  # bytes of file content sent so far


class SourceChanged(OSError):
    """A file shrank between the scan and the send: the payload cannot be completed; the next push resends."""


@dataclass
class Payload:
    """One delta's payload. `size` (and `digest`, when asked for) are set when a stream of it has been produced to
    its end (every stream of one payload is byte for byte the same)."""

    root: Path
    delta: bytes
    files: tuple[FileEntry, ...]
    compress: bool
    size: int | None = None
    digest: str | None = None

    @classmethod
    def for_delta(cls, root: Path, manifest: Manifest, base: Manifest | None, base_id: str | None,
                  compress: bool) -> Payload:
        delta = json.dumps(manifest_delta(manifest, base, base_id if base else None)).encode()
        return cls(root, delta, tuple(changed_entries(manifest, base)), compress)

    @property
    def content_bytes(self) -> int:
        """What the files to send weigh: known before the first byte goes, the total of the progress."""
        return sum(entry.size for entry in self.files)

    def raw(self, on_progress: ProgressHandler | None = None) -> Iterator[bytes]:
        """The payload for an agent that reads it to the end of its stdin: its `tar` reads it straight from
        there, no Python in between. A payload cut short fails in `tar` or in the agent's check of the files."""
        yield self._header("raw")
        size = 0
        for chunk in self._chunks(on_progress):
            size += len(chunk)
            yield chunk
        self.size = size

    def framed(self, on_progress: ProgressHandler | None = None, digest: bool = False) -> Iterator[bytes]:
        """The payload for an agent whose stdin stays open after it (the relay's seed serves until it closes).
        SSH (or a pipe) delivers it intact: only the relay's fetchers, over plain HTTP, need its sha256."""
        yield self._header("framed")
        hasher, size = hashlib.sha256() if digest else None, 0
        for chunk in self._chunks(on_progress):
            if hasher is not None:
                hasher.update(chunk)
            size += len(chunk)
            yield b"%x\n" % len(chunk) + chunk
        self.size = size  # before the trailer: the relay's fetchers need them
        if hasher is not None:
            self.digest = hasher.hexdigest()
        yield b"0 %d\n" % size

    def _header(self, framing: str) -> bytes:
        return f"TPUOPS-STREAM {'gzip' if self.compress else 'tar'} {framing}\n".encode()

    def _chunks(self, on_progress: ProgressHandler | None) -> Iterator[bytes]:
        """The payload in pieces of about CHUNK bytes."""
        out = _Members(self.compress)
        pending: list[bytes] = []
        pending_bytes = 0
        for piece in self._tar(on_progress, out):
            pending.append(piece)
            pending_bytes += len(piece)
            if pending_bytes >= CHUNK:
                yield b"".join(pending)
                pending, pending_bytes = [], 0
        pending.append(out.end())
        yield b"".join(pending)

    def _tar(self, on_progress: ProgressHandler | None, out: _Members) -> Iterator[bytes]:
        first = _header("delta.json", len(self.delta), 0o644) + _padded(self.delta)
        yield out.write(first, compress=True)
        sent = 0
        single = self.root.is_file()
        for entry in self.files:
            path = self.root if single else self.root / entry.path
            with open(path, "rb") as handle:
                compress = self.compress and _compresses(handle, entry.size)
                header = _header("files/" + entry.path, entry.size, entry.mode)
                yield out.write(header, compress)
                left = entry.size
                while left:
                    piece = handle.read(min(CHUNK, left))
                    if not piece:
                        raise SourceChanged(f"{path} shrank while it was being sent; push again")
                    left -= len(piece)
                    sent += len(piece)
                    yield out.write(piece, compress)
                    if on_progress is not None:
                        on_progress(sent)
            padding = _padded_size(entry.size) - entry.size
            yield out.write(b"\0" * padding, compress)
        # the end-of-archive marker, without padding to tar's 10 KiB record: a change of one small file is
        # then a payload of a few KiB, not 10 KiB per worker
        yield out.write(b"\0" * 2 * BLOCK, compress=True)


def _header(name: str, size: int, mode: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = mode
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _padded_size(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (_padded_size(len(data)) - len(data))


def _compresses(handle, size: int) -> bool:  # noqa: ANN001  (a binary file at its start)
    if size <= SAMPLE:
        return True
    sample = handle.read(SAMPLE)
    handle.seek(0)
    return len(zlib.compress(sample, 1)) < WORTH_COMPRESSING * len(sample)


class _Members:
    """Tar bytes in, payload bytes out: as they are, or as consecutive gzip members, level 1 for what compresses
    and stored (level 0) for what does not, a new member each time that changes."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.level: int | None = None
        self.deflate: zlib._Compress | None = None

    def write(self, data: bytes, compress: bool) -> bytes:
        if not self.enabled:
            return data
        level = 1 if compress else 0
        ended = b""
        if level != self.level:
            ended = self.end()
            self.deflate, self.level = zlib.compressobj(level, zlib.DEFLATED, 31), level  # 31: a gzip member
        assert self.deflate is not None
        return ended + self.deflate.compress(data)

    def end(self) -> bytes:
        if self.deflate is None:
            return b""
        ended, self.deflate, self.level = self.deflate.flush(), None, None
        return ended
