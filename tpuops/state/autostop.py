"""What the autostop agent leaves in the bucket when it deletes a cluster's TPU
(`gs://BUCKET/.tpuops/NAME/autostop.json`), read back by `status`, `down` and every command that connects (a TPU
that is gone is said at once instead of after a minute of SSH timeouts)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuops.cloud.blob_types import BlobNotFound
from tpuops.durations import format_duration
from tpuops.spec.autostop import AutostopSpec
from tpuops.state import ClusterState, bucket_of, epoch_seconds, record_prefix

if TYPE_CHECKING:
    from tpuops.cloud.blob_types import BlobStore
    from tpuops.providers.base import Provider
    from tpuops.spec import Spec

RECORD_NAME = "autostop.json"


@dataclass(frozen=True)
class AutostopRecord:
    """What the agent left in the bucket when it deleted the TPU: `status` says why and when it went."""

    cluster: str
    time: str
    reason: str  # idle | max_hours
    detail: str
    node: str
    queued: str | None
    uptime_seconds: float
    created_at: str | None = None  # when the TPU it deleted was created (a later TPU of that name is another)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AutostopRecord:
        return cls(str(data["cluster"]), str(data["time"]), str(data["reason"]), str(data.get("detail", "")),
                   str(data["node"]), data.get("queued"), float(data.get("uptime_seconds") or 0.0),
                   data.get("created_at"))

    def concerns(self, node: str | None, created_at: str | None) -> bool:
        """Whether this record is about that TPU: its node name, and (when both are known) the same creation time:
        a record left from an earlier TPU of the same name says nothing about this one."""
        if node is None or self.node != node:
            return False
        mine, theirs = epoch_seconds(self.created_at), epoch_seconds(created_at)
        return mine is None or theirs is None or abs(mine - theirs) < 2.0

    def line(self, confirmed: bool) -> str:
        """`confirmed`: the TPU API says the TPU is gone. The agent writes its record before it asks for the
        delete, so without that the record says only what the agent set out to do."""
        why = f"({self.reason}: {self.detail}) after {format_duration(self.uptime_seconds)} up"
        if confirmed:
            return f"deleted by autostop at {self.time} {why}"
        return f"autostop asked to delete it at {self.time} {why}; the TPU API does not confirm it is gone"


def setting_of(state: ClusterState, spec: Spec | None) -> AutostopSpec:
    """What the agent should do: the last `up --autostop` / `tpuops autostop`, else the spec's."""
    if state.autostop is not None:
        return state.autostop
    return spec.autostop if spec is not None else AutostopSpec()


def kept_setting(state: ClusterState, spec: Spec | None) -> str | None:
    """What `up` says when it keeps a setting an earlier `up --autostop` or `tpuops autostop` recorded for this
    cluster in place of the spec's (None when they agree): a one-off choice must not stay unseen."""
    if state.autostop is None or spec is None or state.autostop == spec.autostop:
        return None
    return (f"{state.autostop.describe()} kept from an earlier --autostop or `tpuops autostop` (the spec says "
            f"{spec.autostop.describe()}); `tpuops autostop {state.name} DURATION|off` changes it")


def deletion_record(provider: Provider, state: ClusterState, spec: Spec | None) -> AutostopRecord | None:
    """The agent's record when it deleted this cluster's current TPU (a TPU `up` made since is another): one
    read of the bucket, none when autostop is off."""
    bucket = bucket_of(state, spec)
    tpu = state.tpu_record()
    if not bucket or tpu is None or not setting_of(state, spec).enabled:
        return None
    record = read_record(provider.blob_store(record_prefix(bucket, state.name)))
    return record if record is not None and record.concerns(tpu.node_name, tpu.created_at) else None


def read_record(store: BlobStore) -> AutostopRecord | None:
    """The agent's record in gs://BUCKET/.tpuops/NAME/autostop.json, given the provider's store for that
    prefix (`provider.blob_store(record_prefix(bucket, cluster))`)."""
    try:
        raw = store.read_range(RECORD_NAME, 0, 1 << 20)
    except BlobNotFound:
        return None
    try:
        return AutostopRecord.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return None
