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
# v2..v6e (v5litepod), and from TPU7x on tpuN[x]: tpu7x-32.
TYPE_RE = re.compile(r"^(?P<generation>(v|tpu)\d+[a-z]*)-(?P<size>\d+)$")
# Every accelerator type Google names is GENERATION-SIZE (v3-8, v5litepod-16); a new generation keeps that shape.
TYPE_SHAPE_RE = re.compile(r"^(?P<generation>[a-z][a-z0-9]*)-(?P<size>[1-9]\d*)$")
# Legacy TPU Node versions ("2.12.0", "1.15.5", "pytorch-1.8", "nightly") and TPU VM runtimes ("tpu-vm-*",
# "tpu-ubuntu2204-base", "v2-alpha-*") never look like each other.
NODE_VERSION_RE = re.compile(r"^(\d+(\.\d+)+|(pytorch|tf)-[0-9a-z.]+|nightly)(-pod)?$")
VM_RUNTIME_RE = re.compile(r"^(tpu-|v2-alpha)")


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
    runtime_prefixes: tuple[str, ...]
    default_runtime: dict[str, dict[str, str]]
    price_on_demand: float | None  # None: no list price known
    price_spot: float | None
    multislice: bool = False  # several slices joined over the data-center network

    def types(self) -> list[str]:
        return [f"{self.name}-{size}" for size in self.sizes]

    def size_is_possible(self, size: int) -> bool:
        """Whether the host arithmetic allows this size at all (v3-9 never exists; v4-24 might)."""
        if self.hosts_rule == "cores_per_8":
            return size % 8 == 0
        return size in (1, 2, 4) or size % 4 == 0

    def runtimes(self, mode: str) -> tuple[str, ...]:
        return self.node_runtimes if mode == "node" else self.vm_runtimes


@dataclass(frozen=True)
class Accelerator:
    type: str
    generation: Generation
    chips: int
    cores: int
    hosts: int
    listed: bool = True  # False: a size the catalog does not list, its facts worked out by the generation's rules

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    def price_per_hour(self, spot: bool) -> float:
        """The list price, 0.0 where none is known (known_price_per_hour says which)."""
        return self.known_price_per_hour(spot) or 0.0

    def known_price_per_hour(self, spot: bool) -> float | None:
        per_chip = self.generation.price_spot if spot else self.generation.price_on_demand
        return None if per_chip is None else per_chip * self.chips


@dataclass(frozen=True)
class GuardPrices:
    """What the guard VM costs beyond its machine type's hourly price, and the Always Free tier that covers it."""

    as_of: str
    free_machine_type: str
    free_regions: tuple[str, ...]
    free_disk_gb: int
    external_ip_price_per_hour: float
    standard_disk_price_per_gb_month: float


@dataclass(frozen=True)
class Catalog:
    as_of: str
    source: str
    generations: dict[str, Generation]
    aliases: dict[str, str]
    machine_prices: dict[str, float]
    disk_price_per_gb_month: float
    guard: GuardPrices
    compute: ComputeEngineTpus | None = None

    def default_api(self, accelerator_type: str) -> TpuApiName:
        """compute for generations only Compute Engine serves (TPU7x), tpu elsewhere."""
        generation = self.generation_of(accelerator_type)
        found = self.compute.generations.get(generation.name) if self.compute and generation else None
        return found.default_api if found else "tpu"

    def machine_type_price(self, machine_type: str, spot: bool) -> float | None:
        """A Compute Engine TPU machine type's list price per hour: its generation's per-chip price times its chips
        (docs/compute-engine-tpus.md says why that is assumed); None where the catalog has no price."""
        found = self.compute.machine_types().get(machine_type) if self.compute else None
        generation = self.generations.get(found[0]) if found else None
        if found is None or generation is None:
            return None
        per_chip = generation.price_spot if spot else generation.price_on_demand
        return None if per_chip is None else per_chip * found[1]

    def compute_price(self, accelerator_type: str, spot: bool) -> float | None:
        """What this type costs per hour made by Compute Engine: its hosts times their machine type's price (None
        where Compute Engine cannot make it or the catalog has no price)."""
        shape = self.compute_shape(accelerator_type)
        price = self.machine_type_price(shape.machine_type, spot) if shape else None
        return None if shape is None or price is None else price * shape.hosts

    def compute_shape(self, accelerator_type: str) -> ComputeShape | None:
        """How Compute Engine makes this type (None: it does not, or the size has no known machine type)."""
        accelerator = self.accelerator(accelerator_type, listed_only=False)
        if accelerator is None or self.compute is None:
            return None
        return self.compute.shape(accelerator)

    def all_types(self) -> list[str]:
        return [t for generation in self.generations.values() for t in generation.types()]

    def generation_of(self, accelerator_type: str) -> Generation | None:
        match = TYPE_RE.match(accelerator_type)
        return self.generations.get(match["generation"]) if match else None

    def all_zones(self) -> list[str]:
        return sorted({zone for generation in self.generations.values() for zone in generation.zones})

    def accelerator(self, accelerator_type: str, listed_only: bool = True) -> Accelerator | None:
        """The facts for a type like 'v4-32', or None when the catalog does not know it.

        With listed_only=False a size the catalog does not list but the generation's arithmetic allows
        (v4-24) gets facts too, marked `listed=False`."""
        match = TYPE_RE.match(accelerator_type)
        generation = self.generations.get(match["generation"]) if match else None
        if generation is None:
            return None
        size = int(match["size"])
        listed = size in generation.sizes
        if not listed and (listed_only or not generation.size_is_possible(size)):
            return None
        if generation.size_counts == "cores":
            cores, chips = size, size // generation.cores_per_chip
        else:
            chips, cores = size, size * generation.cores_per_chip
        return Accelerator(accelerator_type, generation, chips, cores, hosts_for(generation, chips, cores), listed)

    def alias_for(self, accelerator_type: str) -> str | None:
        """Google's name for a type written with a docs name: v5e-8 -> v5litepod-8 (None if not an alias)."""
        match = TYPE_SHAPE_RE.match(accelerator_type)
        generation = self.aliases.get(match["generation"]) if match else None
        return f"{generation}-{match['size']}" if generation else None

    def runtime_generation(self, runtime: str) -> str | None:
        """The generation a runtime is built for when its name says so (tpu-vm-v4-base -> v4), else None."""
        marked = [(len(prefix), generation.name) for generation in self.generations.values()
                  for prefix in generation.runtime_prefixes if runtime.startswith(prefix)]
        return max(marked)[1] if marked else None

    def default_runtime(self, accelerator: Accelerator, mode: str, framework: str | None) -> str | None:
        key = "node" if mode == "node" else ("vm_pod" if accelerator.multi_host else "vm")
        return accelerator.generation.default_runtime.get(key, {}).get(framework or "jax")

    def zones_offering(self, accelerator: Accelerator) -> tuple[str, ...]:
        return accelerator.generation.zones


TpuApiName = Literal["tpu", "compute"]


@dataclass(frozen=True)
class ComputeGeneration:
    """What Compute Engine needs to make a generation's TPUs: machine types by chips per VM, image, disk, topology."""

    name: str
    default_api: TpuApiName
    tpu_api: bool  # the Cloud TPU API serves it too
    machine_types: dict[int, str]  # chips on one VM -> machine type
    chips_per_host: int  # the chips of each host of a multi-host slice
    image_family: str
    boot_disk_type: str
    topologies: dict[int, str]  # chips of the slice -> acceleratorTopology of its workload policy


@dataclass(frozen=True)
class ComputeShape:
    """One TPU type as Compute Engine VMs: `hosts` instances of `machine_type` (one: no group, no policy)."""

    accelerator_type: str
    machine_type: str
    hosts: int
    chips_per_host: int
    topology: str | None
    image_project: str
    image_family: str
    boot_disk_type: str
    boot_disk_gb: int

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


@dataclass(frozen=True)
class ComputeEngineTpus:
    as_of: str
    source: str
    image_project: str
    boot_disk_gb: int
    generations: dict[str, ComputeGeneration]

    def shape(self, accelerator: Accelerator) -> ComputeShape | None:
        generation = self.generations.get(accelerator.generation.name)
        if generation is None:
            return None
        chips = accelerator.chips
        if chips in generation.machine_types and accelerator.hosts == 1:
            machine, hosts, per_host = generation.machine_types[chips], 1, chips
        elif chips % generation.chips_per_host == 0 and generation.chips_per_host in generation.machine_types:
            machine, per_host = generation.machine_types[generation.chips_per_host], generation.chips_per_host
            hosts = chips // per_host
        else:
            return None
        topology = generation.topologies.get(chips)
        if hosts > 1 and topology is None:  # a multi-host slice is made by its workload policy's topology
            return None
        return ComputeShape(accelerator.type, machine, hosts, per_host, topology,
                            self.image_project, generation.image_family, generation.boot_disk_type, self.boot_disk_gb)

    def machine_types(self) -> dict[str, tuple[str, int]]:
        """Every machine type -> (generation, chips on the VM)."""
        return {machine: (generation.name, chips) for generation in self.generations.values()
                for chips, machine in generation.machine_types.items()}


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
            runtime_prefixes=tuple(g.get("runtime_prefixes", ())),
            default_runtime=g["default_runtime"],
            price_on_demand=g["price_per_chip_hour"]["on_demand"],
            price_spot=g["price_per_chip_hour"]["spot"],
            multislice=g.get("multislice", False),
        )
        for name, g in raw["generations"].items()
    }
    return Catalog(
        as_of=str(raw["as_of"]),
        source=raw["source"],
        generations=generations,
        aliases=dict(raw.get("aliases", {})),
        machine_prices=raw["machine_price_per_hour"],
        disk_price_per_gb_month=raw["disk_price_per_gb_month"],
        guard=GuardPrices(
            as_of=str(raw["guard"]["as_of"]),
            free_machine_type=raw["guard"]["free_machine_type"],
            free_regions=tuple(raw["guard"]["free_regions"]),
            free_disk_gb=int(raw["guard"]["free_disk_gb"]),
            external_ip_price_per_hour=float(raw["guard"]["external_ip_price_per_hour"]),
            standard_disk_price_per_gb_month=float(raw["guard"]["standard_disk_price_per_gb_month"]),
        ),
        compute=_compute_engine(raw.get("compute_engine")),
    )


def _compute_engine(raw: dict | None) -> ComputeEngineTpus | None:
    if not raw:
        return None
    generations = {
        name: ComputeGeneration(
            name=name, default_api=g["default_api"], tpu_api=bool(g["tpu_api"]),
            machine_types={int(chips): machine for chips, machine in g["machine_types"].items()},
            chips_per_host=int(g["chips_per_host"]), image_family=g["image_family"],
            boot_disk_type=g["boot_disk_type"],
            topologies={int(chips): str(shape) for chips, shape in g["topologies"].items()},
        )
        for name, g in raw["generations"].items()
    }
    return ComputeEngineTpus(as_of=str(raw["as_of"]), source=raw["source"], image_project=raw["image_project"],
                             boot_disk_gb=int(raw["boot_disk_gb"]), generations=generations)
