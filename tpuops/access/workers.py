"""The workers of a cluster: numbered across slices from the TPU API's hosts, and which of them a command goes
to (the SSH targets `up` recorded, chosen with --worker and --slice).

Workers are counted across slices (`index`), and with Multislice also named by slice (`s1w3`: slice 1, its host 3),
so `--worker` takes either form; `--slice` narrows to whole slices. A one-slice cluster takes s0wN as worker N.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from tpuops.cloud.base import Worker
from tpuops.errors import UsageError
from tpuops.providers.base import WorkerTarget
from tpuops.state import ClusterState, WorkerRecord

# 3, w3, s1w3; a range of either: 5-7, w5-w7, s1w0-3 (hosts 0..3 of slice 1)
ITEM_RE = re.compile(r"^(?:s(?P<slice>\d+))?w?(?P<low>\d+)(?:-(?:s(?P<high_slice>\d+))?w?(?P<high>\d+))?$")
FORMS = "`all`, indexes like 0,2,5-7, or slice names like s1w3, s1w0-3"


def number_hosts(slices: Sequence[Sequence[Worker]], port: int,
                 role: Literal["tpu", "client_vm"] = "tpu") -> list[WorkerRecord]:
    """Each slice's hosts as worker records, numbered across slices, slice by slice (`index`), and with Multislice
    within their slice too (`slice_index`, the I of s{K}wI)."""
    multislice = len(slices) > 1
    records: list[WorkerRecord] = []
    for slice_id, hosts in enumerate(slices):
        first = len(records)
        records += [WorkerRecord(index=first + w.index, internal_ip=w.internal_ip, external_ip=w.external_ip,
                                 ssh_host=w.external_ip or w.internal_ip, ssh_port=port, home=w.home, role=role,
                                 slice=slice_id, slice_index=w.index if multislice else None) for w in hosts]
    return records


def ssh_targets(state: ClusterState) -> list[WorkerRecord]:
    """The workers commands go to: the client VM when there is one marked as the only target (legacy Node)."""
    client = [w for w in state.workers if w.role == "client_vm"]
    return client or list(state.workers)


def worker_targets(workers: Sequence[WorkerRecord]) -> list[WorkerTarget]:
    return [WorkerTarget(w.name, w.ssh_host, w.ssh_port, w.internal_ip, w.home) for w in workers]


def select_workers(workers: Sequence[WorkerRecord], selection: str | None,
                   slices: str | None = None) -> list[WorkerRecord]:
    """`all`/None, or a comma list of indexes (counted across slices), ranges and slice names; `slices` (a comma
    list of slice numbers) keeps only those slices. An unknown worker or slice is a usage error."""
    pool = _in_slices(workers, slices)
    if selection is None or selection.strip().lower() == "all":
        return pool
    chosen: list[WorkerRecord] = []
    for part in selection.split(","):
        chosen += _one_item(workers, part.strip(), selection)
    in_pool = {w.index for w in pool}
    outside = [w.name for w in chosen if w.index not in in_pool]
    if outside:
        raise UsageError(f"--worker {outside[0]} is not in --slice {slices}", "drop one of the two options")
    return sorted({w.index: w for w in chosen}.values(), key=lambda w: w.index)


def one_worker(workers: Sequence[WorkerRecord], selection: str, slices: str | None = None) -> list[WorkerRecord]:
    """The one worker `tpuops ssh` goes to: --worker N or sKwI; with --slice K alone, that slice's first host."""
    if "," in selection or "-" in selection or selection.strip().lower() == "all":
        raise UsageError(f"--worker {selection}: ssh goes to one worker", "give one index, e.g. --worker 3 or s1w0")
    if slices is not None and selection == "0":
        return _in_slices(workers, slices)[:1]
    return select_workers(workers, selection, slices)


def _one_item(workers: Sequence[WorkerRecord], part: str, selection: str) -> list[WorkerRecord]:
    match = ITEM_RE.match(part.lower())
    if match is None:
        raise UsageError(f"--worker {selection!r}: expected {FORMS}")
    low, high = int(match["low"]), int(match["high"] if match["high"] is not None else match["low"])
    if match["high_slice"] is not None and match["high_slice"] != match["slice"]:
        raise UsageError(f"--worker {part}: a slice-named range stays within one slice",
                         "count across slices with global indexes (e.g. 1-2), or list both ranges: s0w1,s1w0")
    if low > high:
        prefix = f"s{match['slice']}w" if match["slice"] is not None else ""
        raise UsageError(f"--worker {part}: the range is reversed", f"write it low to high: {prefix}{high}-{low}")
    wanted = list(range(low, high + 1))
    if match["slice"] is None:
        by_key = {w.index: w for w in workers}
        valid = f"valid indexes: 0-{max(by_key)}" if by_key else "the cluster has no workers"
    else:
        slice_id = int(match["slice"])
        by_key = {w.slice_index: w for w in workers if w.slice == slice_id and w.slice_index is not None}
        if not by_key and slice_id == 0 and all(w.slice_index is None for w in workers):
            by_key = {w.index: w for w in workers}  # one slice: s0wN is worker N, as it would be with Multislice
        if not by_key:
            raise UsageError(f"--worker {part}: no slice {slice_id} in this cluster", _slice_hint(workers))
        valid = f"slice {slice_id} has s{slice_id}w0-{max(by_key)}"  # type: ignore[type-var]
    unknown = [key for key in wanted if key not in by_key]
    if unknown:
        raise UsageError(f"--worker: no worker {part} in this cluster", valid)
    return [by_key[key] for key in wanted]


def _in_slices(workers: Sequence[WorkerRecord], slices: str | None) -> list[WorkerRecord]:
    if slices is None or slices.strip().lower() == "all":
        return list(workers)
    try:
        wanted = {int(part.strip().removeprefix("s")) for part in slices.split(",")}
    except ValueError:
        raise UsageError(f"--slice {slices!r}: expected slice numbers like 0 or 0,2") from None
    have = {w.slice for w in workers}
    missing = sorted(wanted - have)
    if missing:
        raise UsageError(f"--slice: no slice {missing[0]} in this cluster", _slice_hint(workers))
    return [w for w in workers if w.slice in wanted]


def _slice_hint(workers: Sequence[WorkerRecord]) -> str:
    count = len({w.slice for w in workers})
    return f"this cluster has slices 0-{count - 1}" if count > 1 else "this cluster has one slice: s0wN is worker N"
