"""Listing TPU resources in every zone at once (location `-`) without mistaking a partial answer for "none".

The TPU API lists all zones of a project when the location is `-`; zones it could not reach are named in
the response's `unreachable` field instead of failing the call. A search that missed a zone must not
answer "nothing there", so an unreachable zone is an error here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tpuops.cloud.gcp.waiting import Timing
from tpuops.errors import CloudError

EVERY_ZONE = "-"


def locations(project: str, zones: Sequence[str]) -> list[str]:
    """The parents to list: each zone asked for, or the wildcard location for every zone."""
    return [f"projects/{project}/locations/{zone}" for zone in (zones or [EVERY_ZONE])]


def list_everywhere(timing: Timing, api: str, what: str, parents: Sequence[str],
                    pages_of: Callable[[str], Iterable[Any]], items_of: Callable[[Any], Iterable[Any]]) -> list[Any]:
    """Every item of every page under each parent; raises when a zone was unreachable."""
    found: list[Any] = []
    for parent in parents:
        where = "every zone" if parent.endswith(f"/{EVERY_ZONE}") else parent.rsplit("/", 1)[-1]
        pages = timing.call(lambda parent=parent: list(pages_of(parent)), f"{what} in {where}", api)
        unreachable = sorted({zone_of(location) for page in pages for location in page.unreachable})
        if unreachable:
            raise CloudError(
                f"{what} in {where}: the API could not reach {', '.join(unreachable)}",
                "try again later, or search named zones with --zone",
            )
        found.extend(item for page in pages for item in items_of(page))
    return found


def zone_of(path: str) -> str:
    """The zone of a resource path (projects/P/locations/ZONE/...), or the path itself when it has none."""
    parts = path.split("/")
    return parts[parts.index("locations") + 1] if "locations" in parts[:-1] else path
