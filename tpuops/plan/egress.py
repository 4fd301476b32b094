"""What crossing regions costs: moving a run's data and checkpoints to another pool's region, and a trainer that
reads a bucket in another region than its TPU (every epoch crosses regions).

List prices of Cloud Storage's "data transfer within Google Cloud" (bucket to bucket, or a VM reading a bucket in
another region), USD per GiB, as PRICE_SOURCE says. Oceania's higher rate is not modelled: a move to or from
australia-* is priced as between continents, which understates it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpuops.sizes import GIB, size_text

SAME_CONTINENT_PER_GIB = 0.02
OTHER_CONTINENT_PER_GIB = 0.05
PRICE_SOURCE = ("Cloud Storage list prices, data transfer within Google Cloud (cloud.google.com/storage/pricing), "
                "as of 2026-11: $0.02/GiB within a continent, $0.05/GiB between continents; check the page, "
                "these are not read live")
CONTINENTS = (("us-", "north america"), ("northamerica-", "north america"), ("southamerica-", "south america"),
              ("europe-", "europe"), ("asia-", "asia"), ("me-", "asia"), ("australia-", "oceania"),
              ("africa-", "africa"))


def continent_of(region: str) -> str | None:
    return next((name for prefix, name in CONTINENTS if region.startswith(prefix)), None)


def price_per_gib(source: str, dest: str) -> float:
    """From region `source` to region `dest` (0 within a region)."""
    if source == dest:
        return 0.0
    same = continent_of(source) is not None and continent_of(source) == continent_of(dest)
    return SAME_CONTINENT_PER_GIB if same else OTHER_CONTINENT_PER_GIB


def dollars(size: int, source: str, dest: str) -> float:
    return size / GIB * price_per_gib(source, dest)


@dataclass(frozen=True)
class Sized:
    """Something that moves with the run: what it is, and its size in bytes (None: unknown)."""

    what: str
    size: int | None


def move_cost(items: tuple[Sized, ...], source: str, dest: str) -> str:
    """One line: what moving `items` from `source` to `dest` costs, or why it cannot be said."""
    if source == dest:
        return f"same region as {source}: nothing to move"
    rate = price_per_gib(source, dest)
    known = [item for item in items if item.size is not None]
    unknown = [item.what for item in items if item.size is None]
    total = sum(item.size or 0 for item in known)
    parts = ", ".join(f"{item.what} {size_text(item.size or 0)}" for item in known)
    text = f"from {source}: {parts or 'nothing of known size'} = ${total / GIB * rate:.2f} at ${rate:.2f}/GiB"
    return text + (f" (size unknown: {', '.join(unknown)})" if unknown else "")

