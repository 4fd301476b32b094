"""Host arithmetic for every generation, and the catalog's own consistency."""

from __future__ import annotations

import pytest

from tpuops import catalog

CAT = catalog.load()


@pytest.mark.parametrize(
    ("accelerator_type", "chips", "cores", "hosts"),
    [
        ("v2-8", 4, 8, 1), ("v2-32", 16, 32, 4), ("v2-512", 256, 512, 64),
        ("v3-8", 4, 8, 1), ("v3-32", 16, 32, 4), ("v3-2048", 1024, 2048, 256),
        ("v4-8", 4, 8, 1), ("v4-16", 8, 16, 2), ("v4-32", 16, 32, 4), ("v4-4096", 2048, 4096, 512),
        ("v5p-8", 4, 8, 1), ("v5p-128", 64, 128, 16),
        ("v5litepod-1", 1, 1, 1), ("v5litepod-4", 4, 4, 1), ("v5litepod-8", 8, 8, 1),
        ("v5litepod-16", 16, 16, 4), ("v5litepod-256", 256, 256, 64),
        ("v6e-1", 1, 1, 1), ("v6e-8", 8, 8, 1), ("v6e-16", 16, 16, 4), ("v6e-256", 256, 256, 64),
    ],
)
def test_chips_cores_hosts(accelerator_type: str, chips: int, cores: int, hosts: int) -> None:
    accelerator = CAT.accelerator(accelerator_type)
    assert accelerator is not None
    assert (accelerator.chips, accelerator.cores, accelerator.hosts) == (chips, cores, hosts)


def test_hosts_rule_holds_for_every_size() -> None:
    for generation in CAT.generations.values():
        for accelerator_type in generation.types():
            accelerator = CAT.accelerator(accelerator_type)
            assert accelerator is not None
            if generation.name in ("v2", "v3", "v4", "v5p", "tpu7x"):
                assert accelerator.hosts == max(1, accelerator.cores // 8)
            else:
                assert accelerator.hosts == (1 if accelerator.chips <= 8 else accelerator.chips // 4)


@pytest.mark.parametrize("accelerator_type", ["v3-16", "v7-8", "tpu-8", "v4", "v5e-8"])
def test_unknown_types(accelerator_type: str) -> None:
    assert CAT.accelerator(accelerator_type) is None


def test_catalog_covers_the_generations_with_dated_facts() -> None:
    assert set(CAT.generations) == {"v2", "v3", "v4", "v5litepod", "v5p", "v6e", "tpu7x"}
    assert CAT.as_of and "cloud.google.com" in CAT.source
    for generation in CAT.generations.values():
        if generation.name == "tpu7x":  # Compute Engine only: no TPU API runtime, no public list price found
            assert not generation.vm_runtimes and generation.price_on_demand is None
            continue
        assert generation.zones and generation.vm_runtimes
        assert 0 < generation.price_spot < generation.price_on_demand
        assert generation.node_supported == (generation.name in ("v2", "v3"))
        assert bool(generation.node_runtimes) == generation.node_supported
        defaults = [r for mode in ("vm", "vm_pod") for r in generation.default_runtime[mode].values()]
        assert set(defaults) <= set(generation.vm_runtimes)
        for runtime in generation.default_runtime.get("node", {}).values():
            assert runtime in generation.node_runtimes


def test_prices_scale_with_chips() -> None:
    small, big = CAT.accelerator("v3-8"), CAT.accelerator("v3-32")
    assert small and big
    assert big.price_per_hour(spot=False) == pytest.approx(4 * small.price_per_hour(spot=False))
    assert small.price_per_hour(spot=True) < small.price_per_hour(spot=False)


def test_sizes_the_catalog_does_not_list_get_facts_only_when_possible() -> None:
    unlisted = CAT.accelerator("v4-24", listed_only=False)
    assert unlisted is not None and not unlisted.listed
    assert (unlisted.chips, unlisted.hosts) == (12, 3)
    assert CAT.accelerator("v4-24") is None
    assert CAT.accelerator("v3-9", listed_only=False) is None  # 9 TensorCores cannot be
    assert CAT.accelerator("v6e-3", listed_only=False) is None


@pytest.mark.parametrize(("name", "google"), [("v5e-8", "v5litepod-8"), ("v5e-256", "v5litepod-256"),
                                              ("v5lite-4", "v5litepod-4"), ("v5p-8", None), ("v3_8", None)])
def test_docs_names_map_to_the_api_names(name: str, google: str | None) -> None:
    assert CAT.alias_for(name) == google


@pytest.mark.parametrize(("runtime", "generation"), [
    ("tpu-vm-v4-base", "v4"), ("tpu-vm-v4-pt-2.0", "v4"), ("v2-alpha-tpuv5-lite", "v5litepod"),
    ("v2-alpha-tpuv5", "v5p"), ("v2-alpha-tpuv6e", "v6e"), ("tpu-ubuntu2204-base", None),
    ("tpu-vm-tf-2.18.0-pjrt", None), ("2.12.0", None),
])
def test_runtimes_named_for_one_generation(runtime: str, generation: str | None) -> None:
    assert CAT.runtime_generation(runtime) == generation


def test_catalog_runtimes_fit_their_own_generation() -> None:
    for generation in CAT.generations.values():
        for runtime in generation.vm_runtimes:
            assert CAT.runtime_generation(runtime) in (None, generation.name), runtime
            assert catalog.VM_RUNTIME_RE.match(runtime) and not catalog.NODE_VERSION_RE.match(runtime)
        for version in generation.node_runtimes:
            assert catalog.NODE_VERSION_RE.match(version) and not catalog.VM_RUNTIME_RE.match(version)


@pytest.mark.parametrize(("accelerator_type", "machine", "hosts", "topology"), [
    ("tpu7x-2", "tpu7x-standard-1t", 1, "1x1x1"),
    ("tpu7x-8", "tpu7x-standard-4t", 1, "2x2x1"),
    ("tpu7x-32", "tpu7x-standard-4t", 4, "2x2x4"),
    ("v6e-8", "ct6e-standard-8t", 1, "2x4"),
    ("v6e-16", "ct6e-standard-4t", 4, "4x4"),
    ("v5p-8", "ct5p-hightpu-4t", 1, "2x2x1"),
    ("v5p-32", "ct5p-hightpu-4t", 4, "2x2x4"),
])
def test_compute_engine_shapes_follow_the_hosts_rule(accelerator_type: str, machine: str, hosts: int,
                                                       topology: str) -> None:
    shape = CAT.compute_shape(accelerator_type)
    accelerator = CAT.accelerator(accelerator_type)
    assert shape is not None and accelerator is not None
    assert (shape.machine_type, shape.hosts, shape.topology) == (machine, hosts, topology)
    assert shape.hosts == accelerator.hosts and shape.hosts * shape.chips_per_host == accelerator.chips
    assert shape.image_project == "ubuntu-os-accelerator-images"


def test_compute_engine_serves_tpu7x_by_default_and_only_it() -> None:
    assert CAT.default_api("tpu7x-32") == "compute"
    assert [CAT.default_api(t) for t in ("v6e-8", "v5p-8", "v4-8", "v2-8")] == ["tpu"] * 4
    assert CAT.compute_shape("v4-8") is None and CAT.compute_shape("v5litepod-8") is None
    assert CAT.compute_shape("tpu7x-24") is None  # no accelerator topology for 12 chips: no slice
    assert CAT.accelerator("tpu7x-32").known_price_per_hour(spot=False) is None  # type: ignore[union-attr]
    assert CAT.accelerator("v6e-8").known_price_per_hour(spot=False) == pytest.approx(8 * 2.70)  # type: ignore
