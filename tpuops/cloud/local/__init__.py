"""The embedded local provider: a TPU slice simulated by directories and processes on this machine."""

from __future__ import annotations

from pathlib import Path

from tpuops.cloud.base import Cloud


def make_cloud(root: Path) -> Cloud:
    from tpuops.cloud.local.provider import LocalProvider

    provider = LocalProvider(root)
    return Cloud(project="local", tpus=provider, queued=provider, vms=provider, storage=provider,
                 projects=provider, tpu_nodes=provider)
