"""Finding a cluster's resources by their label when there is no local state to name them.

`find_cluster` asks the project for everything labelled `tpuops-cluster=NAME`: TPU VMs, legacy TPU Nodes and
queued resources in every zone (location `-`), Compute instances in every zone (aggregatedList with a label
filter) and buckets. It answers only after every search ran to the end; when one could not run (no project
known, no credentials, permission denied, retries exhausted, a zone unreachable) it raises `SearchFailed`
saying what could not be searched and how to search anyway. An empty `Discovered` therefore means "nothing
is left", never "we could not look".
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuops.cloud.base import Bucket, Cloud, QueuedResource, TpuNode, Vm
from tpuops.cloud.compute_tpu import TpuSlice, is_compute_tpu
from tpuops.errors import CloudError, ClusterNotFound, TpuopsError, UnreachableError

if TYPE_CHECKING:
    from tpuops.context import Context
    from tpuops.providers.base import Provider

SEARCH_HINT = "pass the spec file, --project ID, or --zone ZONE to search only there"


class SearchFailed(CloudError):
    """A search by label did not run completely: its answer cannot be trusted to mean "nothing there"."""


@dataclass(frozen=True)
class Discovered:
    """Everything labelled with one cluster's name, from a complete search."""

    cluster: str
    project: str
    zones: tuple[str, ...]  # the zones searched; () means every zone of the project
    tpu_vms: tuple[TpuNode, ...] = ()
    tpu_nodes: tuple[TpuNode, ...] = ()  # legacy TPU Nodes (mode "node")
    queued: tuple[QueuedResource, ...] = ()
    vms: tuple[Vm, ...] = ()  # plain VMs (client, guard), not the hosts of a Compute Engine TPU
    buckets: tuple[Bucket, ...] = ()
    compute_tpus: tuple[TpuSlice, ...] = ()  # TPUs made by Compute Engine (one instance, or a slice's group)

    @property
    def empty(self) -> bool:
        return not (self.tpu_vms or self.tpu_nodes or self.queued or self.vms or self.buckets or self.compute_tpus)

    @property
    def where(self) -> str:
        """Where the search looked, for messages ("project p, every zone")."""
        zones = ", ".join(self.zones) if self.zones else "every zone"
        return f"project {self.project}, {zones}"

    def tpu_vms_outside_queued(self) -> tuple[TpuNode, ...]:
        """TPU VMs no found queued resource created: deleting a queued resource (force) deletes its own node."""
        from_queued = {(queued.zone, node) for queued in self.queued
                       for node in (queued.node_names or (queued.node_name,))}
        return tuple(node for node in self.tpu_vms if (node.zone, node.name) not in from_queued)


@dataclass(frozen=True)
class Search:
    what: str  # e.g. "TPU VMs": named in the error when this search fails
    run: Callable[[], list[Any]]


def find_cluster(name: str, project: str | None, open_cloud: Callable[[str], Cloud],
                 zones: Sequence[str] = ()) -> Discovered:
    """Every resource labelled `tpuops-cluster=name` in `project` (in `zones`, or every zone when none).

    `open_cloud(project)` builds the provider's clients. Raises SearchFailed when no project is known or any
    search could not run completely; never answers "nothing" for a search that did not finish."""
    from tpuops.spec import CLUSTER_LABEL

    if not project:
        raise SearchFailed(
            f"cannot search for cluster {name}: no GCP project known",
            "pass the spec file, --project ID, or `gcloud config set project ID`",
        )
    try:
        cloud = open_cloud(project)
    except TpuopsError as err:
        raise _failed(name, project, "any resource", err) from err
    labels = {CLUSTER_LABEL: name}
    zones = tuple(zones)
    searches = [
        Search("TPU VMs", lambda: cloud.tpus.find_nodes(labels, zones)),
        Search("queued resources", lambda: cloud.queued.find_queued(labels, zones)),
        Search("VMs", lambda: cloud.vms.find_vms(labels, zones)),
        Search("buckets", lambda: cloud.storage.find_buckets(labels)),
    ]
    compute = cloud.compute_tpus
    if compute is not None:
        searches.append(Search("Compute Engine TPUs", lambda: compute.find_tpu_vms(labels, zones)))
    legacy = cloud.tpu_nodes
    if legacy is not None:
        searches.append(Search("TPU nodes", lambda: legacy.find_nodes(labels, zones)))
    answers = _run_all(name, project, searches)
    return Discovered(
        cluster=name,
        project=project,
        zones=zones,
        # One provider object may serve both modes (the local one): each mode's list keeps its own nodes only.
        tpu_vms=tuple(node for node in answers["TPU VMs"] if node.mode == "vm"),
        tpu_nodes=tuple(node for node in answers.get("TPU nodes", ()) if node.mode == "node"),
        queued=tuple(answers["queued resources"]),
        vms=tuple(vm for vm in answers["VMs"] if not is_compute_tpu(vm.labels)),
        buckets=tuple(answers["buckets"]),
        compute_tpus=tuple(answers.get("Compute Engine TPUs", ())),
    )


def find_in_project(ctx: Context, name: str, zones: Sequence[str] = ()) -> tuple[Discovered, Provider]:
    """find_cluster in the project the context knows (--project, the environment, gcloud's configuration),
    and the provider searched: what `down NAME` and `status NAME` search when there is no local state."""
    explicit = bool(zones or ctx.project_override)  # the user asked for a search: no guessing then
    close = difflib.get_close_matches(name, ctx.store.names(), n=1)
    if close and not explicit:
        raise ClusterNotFound(f"no cluster named '{name}' here (did you mean {close[0]}?)",
                              f"`tpuops status` lists the clusters here; --project ID searches Google Cloud for "
                              f"'{name}' by label")
    provider = ctx.provider_for()
    return find_cluster(name, provider.project, lambda project: provider.cloud(), zones), provider


def _run_all(name: str, project: str, searches: list[Search]) -> dict[str, list[Any]]:
    """Run the searches at once (each is one or two list calls); the first failure, in search order, is raised."""
    with ThreadPoolExecutor(max_workers=len(searches), thread_name_prefix="tpuops-search") as pool:
        futures = [(search, pool.submit(search.run)) for search in searches]
        answers: dict[str, list[Any]] = {}
        failures: list[tuple[Search, TpuopsError]] = []
        for search, future in futures:
            try:
                answers[search.what] = future.result()
            except TpuopsError as err:
                failures.append((search, err))
    if failures:
        search, err = failures[0]
        if isinstance(err, UnreachableError):
            raise err  # no API answered: the same line as every other command's, not a search that failed
        also = [other.what for other, _ in failures[1:]]
        raise _failed(name, project, search.what, err, also) from err
    return answers


def _failed(name: str, project: str, what: str, err: TpuopsError, also: Sequence[str] = ()) -> SearchFailed:
    more = f" (also failed: {', '.join(also)})" if also else ""
    hint = f"{err.hint}; or {SEARCH_HINT}" if err.hint else SEARCH_HINT
    return SearchFailed(f"could not search project {project} for {what} of cluster {name}: {err.message}{more}", hint)
