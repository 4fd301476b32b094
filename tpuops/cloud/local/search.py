"""Finding the local provider's resources by label (`tpuops down NAME` without local state).

A mixin of the local cloud: it answers from the same records the provider's `list_*` calls read. There are
no zones on this machine to be unreachable, so a search here is always complete.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from tpuops.cloud.base import Bucket, QueuedResource, TpuNode, Vm, has_labels


class Records(Protocol):
    """What the mixin needs of the provider: its listings (every zone: zones mean nothing locally) and records."""

    def list_nodes(self, zone: str) -> list[TpuNode]: ...
    def list_queued(self, zone: str) -> list[QueuedResource]: ...
    def list_vms(self, zone: str) -> list[Vm]: ...
    def _all(self, kind: str) -> Iterator[dict]: ...


class LocalSearch:
    """find_* over the records of the class it is mixed into (see `Records`)."""

    def find_nodes(self: Records, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[TpuNode]:
        return [node for node in self.list_nodes("") if _wanted(node.labels, node.zone, labels, zones)]

    def find_queued(self: Records, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[QueuedResource]:
        return [queued for queued in self.list_queued("") if _wanted(queued.labels, queued.zone, labels, zones)]

    def find_vms(self: Records, labels: Mapping[str, str], zones: Sequence[str] = ()) -> list[Vm]:
        return [vm for vm in self.list_vms("") if _wanted(vm.labels, vm.zone, labels, zones)]

    def find_buckets(self: Records, labels: Mapping[str, str]) -> list[Bucket]:
        buckets = (Bucket(**record) for record in self._all("bucket-meta"))
        return [bucket for bucket in buckets if has_labels(bucket.labels, labels)]


def _wanted(labels: Mapping[str, str], zone: str, wanted: Mapping[str, str], zones: Sequence[str]) -> bool:
    return has_labels(labels, wanted) and (not zones or zone in zones)
