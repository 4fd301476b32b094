"""The embedded local provider: a TPU slice simulated by directories and processes on this machine."""

from __future__ import annotations

from pathlib import Path

from tpuops.cloud.base import Cloud


def make_cloud(root: Path) -> Cloud:
    from tpuops.cloud.local.apis import LocalCloud
    from tpuops.cloud.local.compute_tpus import LocalComputeTpus
    from tpuops.cloud.local.quotas import LocalQuotas

    apis = LocalCloud(root)
    return Cloud(project="local", tpus=apis, queued=apis, vms=apis, storage=apis, projects=apis, tpu_nodes=apis,
                 quotas=LocalQuotas(root), compute_tpus=LocalComputeTpus(root))
