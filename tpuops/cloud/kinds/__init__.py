"""Resource kinds as handlers (see base.py): one per kind, looked up by the kind a plan or a record names."""

from __future__ import annotations

from tpuops.cloud.kinds.base import Handler
from tpuops.cloud.kinds.client_vm import ClientVmKind
from tpuops.cloud.kinds.compute_tpu import ComputeTpuKind
from tpuops.cloud.kinds.guard_vm import GuardVmKind
from tpuops.cloud.kinds.storage import BucketKind, IamKind
from tpuops.cloud.kinds.tpu import QueuedKind, TpuKind
from tpuops.plan import Kind

# In the order `up` observes them: each after the kinds its observation needs (IAM needs the bucket and,
# for a legacy Node, the TPU; the client VM goes where the TPU is). `down` searches zones in this order too,
# so a queued resource is found before the TPU it brings along.
HANDLERS: dict[Kind, Handler] = {
    "queued_resource": QueuedKind(),
    "tpu": TpuKind(),
    "compute_tpu": ComputeTpuKind(),
    "client_vm": ClientVmKind(),
    "guard_vm": GuardVmKind(),
    "bucket": BucketKind(),
    "iam": IamKind(),
}


def handler(kind: Kind) -> Handler:
    return HANDLERS[kind]
