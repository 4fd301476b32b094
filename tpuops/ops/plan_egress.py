"""What `plan` says about crossing regions with several pools: what moving the run to each other pool costs (its
data and checkpoints copied to that region's bucket), and a gs:// path in the trainer's command or env that lies
in another region than a pool's TPU (read every epoch, across regions). Prices: plan/egress.py.

Sizes are known for data pushed from this machine (its files); with --live the bucket is listed too (the
checkpoints, a path the trainer reads), and a bucket's region asked when its name does not say it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from tpuops.cloud.base import Cloud
from tpuops.errors import TpuopsError
from tpuops.plan import PoolPlan
from tpuops.plan.egress import Sized, dollars, move_cost, price_per_gib
from tpuops.providers.base import Provider
from tpuops.sizes import size_text
from tpuops.spec import Spec

GS_URL = re.compile(r"gs://[a-z0-9][-_.a-z0-9]*[a-z0-9](?:/[^\s'\"]*)?")


def with_move_costs(spec: Spec, base_dir: Path, pools: tuple[PoolPlan, ...],
                    provider: Provider | None) -> tuple[PoolPlan, ...]:
    """Each pool after the first with what moving the run there from the first pool costs."""
    if len(pools) < 2:
        return pools
    home = pools[0].region
    items = (*data_sizes(spec, base_dir, home), *checkpoint_size(spec, home, provider))
    return (pools[0], *(dataclasses.replace(pool, move=move_cost(items, home, pool.region)) for pool in pools[1:]))


def data_sizes(spec: Spec, base_dir: Path, region: str) -> list[Sized]:
    return [Sized(f"data {spec.in_region(item.to, region)}", local_size(base_dir / Path(item.from_).expanduser()))
            for item in spec.data if item.to.startswith("gs://")]


def checkpoint_size(spec: Spec, region: str, provider: Provider | None) -> list[Sized]:
    url = spec.checkpoints_for(region)
    if url is None:
        return []
    return [Sized(f"checkpoints {url}", bucket_size(provider, url))]


def local_size(path: Path) -> int | None:
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(item.stat().st_size for item in path.rglob("*") if item.is_file()) if path.is_dir() else None
    except OSError:
        return None


def bucket_size(provider: Provider | None, url: str) -> int | None:
    if provider is None:
        return None
    try:
        return sum(info.size for info in provider.blob_store(url).list())
    except TpuopsError:
        return None


def cross_region_reads(spec: Spec, base_dir: Path, pools: tuple[PoolPlan, ...], provider: Provider | None,
                       cloud: Cloud | None) -> list[str]:
    """A warning per gs:// path the trainer names that lies in another region than a pool's TPU."""
    if spec.trainer is None:
        return []
    texts = {"trainer.command": spec.trainer.command,
             **{f"trainer.env.{name}": value for name, value in spec.trainer.env.items()}}
    warnings = []
    for where, text in texts.items():
        for url in dict.fromkeys(GS_URL.findall(text)):
            region = bucket_region(spec, pools, url, cloud)
            if region is None:
                continue
            size = read_size(spec, base_dir, url, region, provider)
            for index, pool in enumerate(pools, 1):
                if pool.region == region:
                    continue
                cost = (f"${dollars(size, region, pool.region):.2f} per epoch over {size_text(size)}"
                        if size is not None else "size unknown (plan --live lists it)")
                warnings.append(f"{where} reads {url} in {region}, but pool {index}'s TPU runs in {pool.region}: "
                                f"every epoch crosses regions at ${price_per_gib(region, pool.region):.2f}/GiB, "
                                f"{cost} at list price; a data: entry or $TPUOPS_CHECKPOINT_DIR follows the TPU's "
                                "region")
    return warnings


def bucket_region(spec: Spec, pools: tuple[PoolPlan, ...], url: str, cloud: Cloud | None) -> str | None:
    """The region of the URL's bucket: a region's bucket of the spec by its name, else (--live) as the bucket
    says (None: unknown, or a multi-region)."""
    name = url[len("gs://"):].split("/", 1)[0]
    for pool in pools:
        if spec.bucket_for(pool.region) == name:
            return pool.region
    if cloud is None:
        return None
    try:
        found = cloud.storage.get_bucket(name)
    except TpuopsError:
        return None
    location = found.location.lower() if found is not None else ""
    return location if "-" in location else None


def read_size(spec: Spec, base_dir: Path, url: str, region: str, provider: Provider | None) -> int | None:
    """The size of what `url` names: from the local files a data: entry pushes there, else (--live) listed."""
    for item in spec.data:
        to = spec.in_region(item.to, region).rstrip("/")
        if to.startswith("gs://") and (url == to or url.startswith(to + "/")):
            return local_size(base_dir / Path(item.from_).expanduser() / url[len(to):].lstrip("/"))
    return bucket_size(provider, url)
