"""Where the local provider keeps things under its root (`TPUOPS_HOME/local`): the one home of that layout."""

from __future__ import annotations

from pathlib import Path

LOOPBACK = "127.0.0.1"  # every simulated host's address


def buckets_root(root: Path) -> Path:
    """The directory standing for gs://: gs://NAME/PATH is buckets_root/NAME/PATH."""
    return root / "buckets"


def bucket_path(root: Path, url: str) -> Path:
    """gs://BUCKET/PATH on the local provider: the bucket's directory under `root`."""
    bucket, _, rest = url.removeprefix("gs://").partition("/")
    return buckets_root(root).joinpath(bucket, *[part for part in rest.split("/") if part])
