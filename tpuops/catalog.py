"""The TPU catalog: accelerator type -> generation, chips, TensorCores, hosts, zones, runtimes, prices.

The facts are data (`data/catalog.yaml`, with their date and source); this module only reads them and
does the host arithmetic the data names (`hosts_rule`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml

Framework = Literal["tensorflow", "pytorch", "jax"]
TYPE_RE = re.compile(r"^(?P<generation>v\d+[a-z]*)-(?P<size>\d+)$")


@dataclass(frozen=True)
class Generation:
    name: str
    size_counts: Literal["cores", "chips"]
    cores_per_chip: int
    hosts_rule: Literal["cores_per_8", "one_host_up_to_8_chips"]
    sizes: tuple[int, ...]
    zones: tuple[str, ...]
    node_supported: bool
    vm_runtimes: tuple[str, ...]
    node_runtimes: tuple[str, ...]
    default_runtime: dict[str, dict[str, str]]
    price_on_demand: float
    price_spot: float

    def types(self) -> list[str]:
        return [f"{self.name}-{size}" for size in self.sizes]


@dataclass(frozen=True)
class Accelerator:
    type: str
    generation: Generation
    chips: int
    cores: int
    hosts: int

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    def price_per_hour(self, spot: bool) -> float:
        per_chip = self.generation.price_spot if spot else self.generation.price_on_demand
        return per_chip * self.chips


@dataclass(frozen=True)
class Catalog:
    as_of: str
    source: str
    generations: dict[str, Generation]
    machine_prices: dict[str, float]
    disk_price_per_gb_month: float

    def all_types(self) -> list[str]:
        return [t for generation in self.generations.values() for t in generation.types()]

    def generation_of(self, accelerator_type: str) -> Generation | None:
        match = TYPE_RE.match(accelerator_type)
        return self.generations.get(match["generation"]) if match else None

    def accelerator(self, accelerator_type: str) -> Accelerator | None:
        """The facts for a type like 'v4-32', or None when the catalog does not know it."""
        match = TYPE_RE.match(accelerator_type)
        generation = self.generations.get(match["generation"]) if match else None
        if generation is None or int(match["size"]) not in generation.sizes:
            return None
        size = int(match["size"])
        if generation.size_counts == "cores":
            cores, chips = size, size // generation.cores_per_chip
        else:
            chips, cores = size, size * generation.cores_per_chip
        return Accelerator(accelerator_type, generation, chips, cores, hosts_for(generation, chips, cores))

    def default_runtime(self, accelerator: Accelerator, mode: str, framework: str | None) -> str | None:
        key = "node" if mode == "node" else ("vm_pod" if accelerator.multi_host else "vm")
        return accelerator.generation.default_runtime.get(key, {}).get(framework or "jax")

    def zones_offering(self, accelerator: Accelerator) -> tuple[str, ...]:
        return accelerator.generation.zones


def hosts_for(generation: Generation, chips: int, cores: int) -> int:
    if generation.hosts_rule == "cores_per_8":
        return max(1, cores // 8)
    return 1 if chips <= 8 else chips // 4


@cache
def load() -> Catalog:
    raw = yaml.safe_load(resources.files("tpuops.data").joinpath("catalog.yaml").read_text())
    generations = {
        name: Generation(
            name=name,
            size_counts=g["size_counts"],
            cores_per_chip=g["cores_per_chip"],
            hosts_rule=g["hosts_rule"],
            sizes=tuple(g["sizes"]),
            zones=tuple(g["zones"]),
            node_supported=g["node_supported"],
            vm_runtimes=tuple(g["vm_runtimes"]),
            node_runtimes=tuple(g.get("node_runtimes", ())),
            default_runtime=g["default_runtime"],
            price_on_demand=g["price_per_chip_hour"]["on_demand"],
            price_spot=g["price_per_chip_hour"]["spot"],
        )
        for name, g in raw["generations"].items()
    }
    return Catalog(
        as_of=str(raw["as_of"]),
        source=raw["source"],
        generations=generations,
        machine_prices=raw["machine_price_per_hour"],
        disk_price_per_gb_month=raw["disk_price_per_gb_month"],
    )
