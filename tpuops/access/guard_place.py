"""Where a cluster's guard keeps its lease and ledger (`gs://BUCKET/.tpuops/NAME/guard/`), and the secrets and
settings it reads from the spec."""

from __future__ import annotations

from pathlib import Path

from tpuops.cloud.blob_types import BlobStore
from tpuops.context import Context
from tpuops.providers.guard_host import GUARD_PREFIX, NOTIFY_FILE
from tpuops.spec import Spec
from tpuops.state import ClusterState, bucket_of, record_prefix


def guard_url(bucket: str, cluster: str) -> str:
    return f"{record_prefix(bucket, cluster)}/{GUARD_PREFIX}"


def guard_store(ctx: Context, state: ClusterState, spec: Spec | None) -> BlobStore | None:
    """The guard's store in the run's bucket; None when the cluster has no bucket."""
    bucket = (spec.home_bucket if spec is not None else None) or bucket_of(state, spec)
    if bucket is None:
        return None
    return ctx.provider_for(spec, state).blob_store(guard_url(bucket, state.name))


def notify_url(spec: Spec | None, cluster_dir: Path | None = None) -> str | None:
    """The webhook the spec names, else the one `guard up` gave a guard VM (whose staged spec leaves it out);
    a secret: handed to the notifier only, never printed or stored in the bucket."""
    secret = spec.guard.notify if spec is not None else None
    if secret is not None:
        return secret.get_secret_value()
    try:
        given = (cluster_dir / NOTIFY_FILE).read_text().strip() if cluster_dir is not None else ""
    except OSError:
        return None
    return given or None
