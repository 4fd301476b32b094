"""The spec's pools: where the TPU may run, in order (`tpu.pools`), and what a single-pool reader sees of them.

A model of its own beside spec.py (which imports it, never the reverse), as the guard's and watchdog's sections.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from tpuops.durations import parse_duration
from tpuops.errors import UsageError

REGION_FIELD = "{region}"  # in bucket.name: one bucket per region, named after it
POOL_REPLACES = ("type", "runtime", "spot", "preemptible", "zones")
Provisioning = Literal["spot", "preemptible", "on-demand"]


def region_of(zone: str) -> str:
    """europe-west4-a -> europe-west4 (a zone is its region plus one last '-x')."""
    return zone.rsplit("-", 1)[0]


class PoolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: str = Field(description="Accelerator type, e.g. v4-32, v5litepod-8, v6e-8.")
    zone: str = Field(description="The pool's zone, e.g. europe-west4-a.")
    provisioning: Provisioning = Field(description="spot, preemptible or on-demand: which quota the TPU draws on "
                                       "(spot and preemptible share Google's preemptible quota).")
    runtime: str | None = Field(None, description="TPU VM runtime; default: the catalog's for the generation and "
                                "framework.")
    reservation: str | None = Field(None, description="A reservation to create the TPU from (its queued resource's "
                                    "reservation_name).")

    @property
    def spot(self) -> bool:
        return self.provisioning == "spot"

    @property
    def preemptible(self) -> bool:
        return self.provisioning == "preemptible"

    @property
    def region(self) -> str:
        return region_of(self.zone)

    @property
    def label(self) -> str:
        """How lines name the pool: `v6e-8 spot in europe-west4-a`."""
        return f"{self.type} {self.provisioning} in {self.zone}"


DEFAULT_MOVE_AFTER = 900.0  # tpu.move_after: 15 minutes of failing to re-create in the same pool


def _move_after(value: Any) -> float:
    """A duration like 15m (or a number of seconds): how long recovery keeps trying the pool it was in."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"cannot read {value!r} as a duration (write it like 15m, 1h or 900)")
    try:
        seconds = parse_duration(str(value))
    except UsageError:
        raise ValueError(f"cannot read {value!r} as a duration (write it like 15m, 1h or 900)") from None
    if seconds < 0:
        raise ValueError("move_after cannot be negative")
    return seconds


MoveAfter = Annotated[float, BeforeValidator(_move_after),
                      WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}]})]


def type_not_required(schema: dict[str, Any]) -> None:
    """With tpu.pools the first pool names the type: an editor must not ask for tpu.type then."""
    schema["required"] = [name for name in schema.get("required", []) if name != "type"]


def first_pool_fields(tpu: Any) -> Any:
    """The `tpu` mapping with type, runtime, spot and preemptible taken from its first pool: what every single-pool
    reader (up, status, the guard) sees. Naming them beside pools is an error."""
    if not isinstance(tpu, dict) or not isinstance(tpu.get("pools"), list):
        return tpu
    if not tpu["pools"]:
        return {"type": "", **tpu}  # so the error is the empty list's, not a missing tpu.type
    both = [key for key in POOL_REPLACES if key in tpu]
    if both:
        raise ValueError(f"tpu.pools replaces tpu.{both[0]}: give each pool its own type, zone, provisioning "
                         "and runtime, and leave them out of tpu")
    first = tpu["pools"][0] if isinstance(tpu["pools"][0], dict) else {}
    provisioning = first.get("provisioning")
    filled = {"type": first.get("type") if isinstance(first.get("type"), str) else "",
              "spot": provisioning == "spot", "preemptible": provisioning == "preemptible"}
    if isinstance(first.get("runtime"), str):
        filled["runtime"] = first["runtime"]
    return {**tpu, **filled}


def zone_of_first_pool(data: dict[str, Any]) -> dict[str, Any]:
    """The spec mapping with the top-level zone set to the first pool's (an error when it names another)."""
    tpu = data.get("tpu")
    pools = tpu.get("pools") if isinstance(tpu, dict) else None
    if not (isinstance(pools, list) and pools and isinstance(pools[0], dict) and isinstance(pools[0].get("zone"), str)):
        return data
    first = pools[0]["zone"]
    if data.get("zone") not in (None, first):
        raise ValueError(f"zone: {data['zone']} is not the first pool's zone {first}: with tpu.pools each pool "
                         "names its own zone, so leave the top-level zone out")
    return {**data, "zone": first}


def bucket_of_first_region(data: dict[str, Any], default_zone: str) -> tuple[dict[str, Any], str | None]:
    """The spec mapping with a bucket.name holding {region} filled in for the top-level zone's region, and the
    name as written (None when it holds no {region})."""
    bucket = data.get("bucket")
    pattern = bucket.get("name") if isinstance(bucket, dict) else None
    if not (isinstance(pattern, str) and REGION_FIELD in pattern):
        return data, None
    if bucket.get("location"):
        raise ValueError("bucket.location: it fixes one location, but bucket.name holds {region} (a bucket in "
                         "each pool's region): drop bucket.location")
    zone = data.get("zone") if isinstance(data.get("zone"), str) else default_zone
    return {**data, "bucket": {**bucket, "name": pattern.replace(REGION_FIELD, region_of(zone))}}, pattern


def single_pool(tpu: Any, zone: str) -> PoolSpec:
    """The single form (tpu: {type, spot, ...} and the top-level zone) as one pool."""
    provisioning = "spot" if tpu.spot else "preemptible" if tpu.preemptible else "on-demand"
    return PoolSpec.model_construct(type=tpu.type, zone=zone, provisioning=provisioning, runtime=tpu.runtime,
                                    reservation=None)


def placed_fields(spec: Any, pool: PoolSpec) -> dict[str, Any]:
    """The fields of `spec` (a Spec) that change when its TPU is placed in `pool` (Spec.in_pool)."""
    tpu = spec.tpu.model_copy(update={
        "type": pool.type, "runtime": pool.runtime, "spot": pool.spot, "preemptible": pool.preemptible,
        "zones": [] if spec.tpu.pools else spec.tpu.zones, "pools": [pool] if spec.tpu.pools else []})
    bucket = spec.bucket.model_copy(update={"name": spec.bucket_for(pool.region)}) if spec.bucket else None
    trainer = spec.trainer.model_copy(update={"checkpoints": spec.checkpoints_for(pool.region)}) \
        if spec.trainer else None
    data = [item.model_copy(update={"to": spec.in_region(item.to, pool.region)}) for item in spec.data]
    return {"tpu": tpu, "zone": pool.zone, "bucket": bucket, "trainer": trainer, "data": data}


def url_in_region(url: str, region: str, first: str | None, wanted: str | None) -> str:
    """A gs:// URL moved to `region`'s bucket: {region} filled in, or the first region's bucket `first` (what
    bucket.name reads as) replaced by `wanted`. Other URLs and paths stay as they are."""
    if not url.startswith("gs://"):
        return url
    if REGION_FIELD in url:
        return url.replace(REGION_FIELD, region)
    if first and wanted and (url == f"gs://{first}" or url.startswith(f"gs://{first}/")):
        return f"gs://{wanted}" + url[len(f"gs://{first}"):]
    return url
