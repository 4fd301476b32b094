"""Resource kinds as handlers (see base.py): one per kind, looked up by the kind a plan or a record names."""

from __future__ import annotations

from tpuops.cloud.kinds.base import Handler, TpuHandler
from tpuops.cloud.kinds.client_vm import ClientVmKind
from tpuops.cloud.kinds.compute_tpu import ComputeTpuKind
from tpuops.cloud.kinds.guard_vm import GuardVmKind
from tpuops.cloud.kinds.storage import BucketKind, IamKind
from tpuops.cloud.kinds.tpu import QueuedKind, TpuKind
from tpuops.plan import Kind

# The kinds that are the cluster's TPU: each creates it its own way (TpuHandler.create).
TPU_HANDLERS: dict[Kind, TpuHandler] = {
    "queued_resource": QueuedKind(),
    "tpu": TpuKind(),
    "compute_tpu": ComputeTpuKind(),
}
# In the order `up` observes them: each after the kinds its observation needs (IAM needs the bucket and,
# for a legacy Node, the TPU; the client VM goes where the TPU is). `down` searches zones in this order too,
# so a queued resource is found before the TPU it brings along.
HANDLERS: dict[Kind, Handler] = {
    **TPU_HANDLERS,
    "client_vm": ClientVmKind(),
    "guard_vm": GuardVmKind(),
    "bucket": BucketKind(),
    "iam": IamKind(),
}


def handler(kind: Kind) -> Handler:
    return HANDLERS[kind]


def tpu_handler(kind: Kind) -> TpuHandler:
    """The handler of a TPU kind (`tpu_kind(spec)`)."""
    return TPU_HANDLERS[kind]
