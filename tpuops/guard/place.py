"""Where a cluster's guard keeps its lease and ledger (`gs://BUCKET/.tpuops/NAME/guard/`), and the secrets and
settings it reads from the spec."""

from __future__ import annotations

from tpuops.cloud.blob_types import BlobStore
from tpuops.context import Context
from tpuops.guard.autostop.client import record_prefix
from tpuops.guard.host import GUARD_PREFIX
from tpuops.spec import Spec
from tpuops.state import ClusterState, bucket_of


def guard_url(bucket: str, cluster: str) -> str:
    return f"{record_prefix(bucket, cluster)}/{GUARD_PREFIX}"


def guard_store(ctx: Context, state: ClusterState, spec: Spec | None) -> BlobStore | None:
    """The guard's store in the run's bucket; None when the cluster has no bucket."""
    bucket = bucket_of(state, spec)
    if bucket is None:
        return None
    return ctx.provider_for(spec, state).blob_store(guard_url(bucket, state.name))


def notify_url(spec: Spec | None) -> str | None:
    """The webhook the spec names (a secret: handed to the notifier only, never printed or stored)."""
    secret = spec.guard.notify if spec is not None else None
    return secret.get_secret_value() if secret is not None else None
