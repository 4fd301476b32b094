"""The embedded local provider: a TPU slice simulated by directories and processes on this machine."""

from __future__ import annotations

from pathlib import Path

from tpuops.cloud.base import Cloud


def local_path_for(root: Path, url: str) -> Path:
    """gs://BUCKET/PATH on the local provider: the bucket's directory under `root`."""
    bucket, _, rest = url.removeprefix("gs://").partition("/")
    return root / "buckets" / bucket / rest if rest else root / "buckets" / bucket


def make_cloud(root: Path) -> Cloud:
    from tpuops.cloud.local.provider import LocalProvider

    provider = LocalProvider(root)
    return Cloud(project="local", tpus=provider, queued=provider, vms=provider, storage=provider,
                 projects=provider, tpu_nodes=provider)
