"""Which store a storage URL names: `gs://bucket[/prefix]` is GCS (or, on the local provider, a directory
standing for the bucket), `file://PATH` or a plain path is a directory. Apart from `blobs.py` so that the
interface never imports its GCS implementation (which imports the interface).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tpuops.cloud.blobs import BlobStore, DirBlobStore
from tpuops.errors import UsageError


def open_blob_store(url: str, env: Mapping[str, str] | None = None, local_buckets: Path | None = None) -> BlobStore:
    """`gs://bucket[/prefix]` -> GCS; `file://PATH` or a plain path -> a directory. Bad URLs -> UsageError.

    `local_buckets`: the local provider's directory of buckets; gs://NAME/P then means local_buckets/NAME/P.
    """
    url = url.strip()
    if url.startswith("gs://"):
        bucket, _, prefix = url[len("gs://"):].partition("/")
        if not bucket:
            raise UsageError(f"{url!r} names no bucket", "write gs://BUCKET/PATH")
        if local_buckets is not None:
            return DirBlobStore(local_buckets.joinpath(bucket, *[part for part in prefix.split("/") if part]))
        from tpuops.cloud.gcp.gcs_blobs import GcsBlobStore

        return GcsBlobStore(bucket, prefix, env=env)
    if url.startswith("file://"):
        return DirBlobStore(url[len("file://"):])
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise UsageError(f"unsupported storage URL scheme {scheme}:// in {url!r}",
                         "use gs://BUCKET/PATH or a local directory")
    if not url:
        raise UsageError("empty storage location", "use gs://BUCKET/PATH or a local directory")
    return DirBlobStore(os.path.expanduser(url))
