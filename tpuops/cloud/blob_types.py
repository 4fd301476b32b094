"""The blob types every store shares, apart from `blobs.py` so that `cloud/gcp/gcs_blobs.py` can use them
without importing the module that opens it (which made a circle: blobs -> gcs_blobs -> blobs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from tpuops.errors import CloudError


class BlobNotFound(CloudError):
    """The blob is gone (deleted between a listing and a read, or never there)."""


class PreconditionFailed(CloudError):
    """A conditional write lost: the blob's generation was not the one the writer had read (HTTP 412)."""


@dataclass(frozen=True)
class VersionedBlob:
    """A blob's whole content and the generation it had when read (the token for a conditional write)."""

    data: bytes
    generation: int


@dataclass(frozen=True)
class BlobInfo:
    name: str
    size: int
    crc32c: str | None  # base64 of the big-endian CRC32C, as GCS reports it; None when not computed
    updated: float | None  # seconds since the epoch


@runtime_checkable
class BlobStore(Protocol):
    """Where blobs live. Every method is one logical request (a listing may page internally)."""

    @property
    def url(self) -> str: ...

    def list(self, prefix: str = "", *, checksums: bool = False) -> list[BlobInfo]:
        """All blobs whose name starts with `prefix`, recursively. `checksums=True` asks for crc32c where the
        store has to compute it (a directory); GCS always reports it."""
        ...

    def read_range(self, name: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of a blob; fewer if the blob is shorter. Raises BlobNotFound."""
        ...

    def upload_file(self, local_path: str | Path, name: str) -> BlobInfo:
        """Store a local file's content as `name`, replacing it whole (readers never see half a blob)."""
        ...

    def delete(self, name: str) -> None:
        """Remove a blob; a blob already gone is not an error."""
        ...

    def read_versioned(self, name: str) -> VersionedBlob:
        """The whole blob with its generation, read together. Raises BlobNotFound."""
        ...

    def write_bytes(self, name: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        """Replace the blob whole and return its new generation. With `if_generation_match` the write happens
        only while the blob's generation is that one (0: only if the blob does not exist), else
        PreconditionFailed: compare-and-swap, safe between processes and machines."""
        ...
