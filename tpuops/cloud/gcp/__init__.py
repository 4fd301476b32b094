"""The Google Cloud provider. Google's SDKs are imported only inside functions (the CLI must start fast)."""

from __future__ import annotations

from collections.abc import Mapping

from tpuops.cloud.base import Cloud


def make_cloud(env: Mapping[str, str], project: str) -> Cloud:
    """Real clients for `project`, endpoints and credentials from `env` (see clients.py)."""
    from tpuops.cloud.gcp import clients
    from tpuops.cloud.gcp.compute import ComputeApi
    from tpuops.cloud.gcp.compute_tpus import ComputeTpusApi
    from tpuops.cloud.gcp.firewalls import FirewallsApi
    from tpuops.cloud.gcp.quotas import CloudQuotasApi
    from tpuops.cloud.gcp.storage import GcsApi
    from tpuops.cloud.gcp.tpu_node import TpuNodeApi
    from tpuops.cloud.gcp.tpu_vm import TpuVmApi
    from tpuops.cloud.gcp.waiting import Timing

    endpoints = clients.Endpoints.from_env(env)
    creds = clients.credentials(endpoints)
    timing = Timing.from_env(env)
    tpu_vms = TpuVmApi(lambda: clients.tpu_v2_client(endpoints, creds), project, timing)
    compute = ComputeApi(lambda: clients.compute_clients(endpoints, creds), project, timing)
    return Cloud(
        project=project,
        tpus=tpu_vms,
        queued=tpu_vms,
        vms=compute,
        storage=GcsApi(lambda: clients.storage_client(endpoints, creds, project), timing),
        projects=compute,
        tpu_nodes=TpuNodeApi(lambda: clients.tpu_v1_client(endpoints, creds), project, timing),
        firewalls=FirewallsApi(lambda: clients.firewalls_client(endpoints, creds), project, timing),
        quotas=CloudQuotasApi(lambda: clients.quotas_client(endpoints, creds), project, timing),
        compute_tpus=ComputeTpusApi(lambda: clients.compute_tpu_clients(endpoints, creds), project, timing),
    )
