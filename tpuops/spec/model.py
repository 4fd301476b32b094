"""The spec's models (pydantic, extra="forbid"): the cluster, its TPU and pools, bucket, code, data, trainer, logs
and ssh, with the sections of the features beside them in this package (guard, autostop, watch, check, pools).

Only shape and local rules live here; rules that need the TPU catalog are in `rules.py`, and reading YAML with
file:line:field errors in `spec/loading.py`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from tpuops.durations import run_time_seconds
from tpuops.spec.autostop import AutostopSpec
from tpuops.spec.check import CheckSpec, env_names
from tpuops.spec.guard import GuardSpec
from tpuops.spec.pools import (
    DEFAULT_MOVE_AFTER,
    REGION_FIELD,
    MoveAfter,
    PoolSpec,
    bucket_of_first_region,
    first_pool_fields,
    placed_fields,
    region_of,
    single_pool,
    type_not_required,
    url_in_region,
    zone_of_first_pool,
)
from tpuops.spec.watch import WatchSpec

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
LABEL_KEY_RE = re.compile(r"^[a-z][-_a-z0-9]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[-_a-z0-9]{0,63}$")
CLUSTER_LABEL = "tpuops-cluster"
LOCAL_ZONE = "local"
FLEX_START_MIN_S = 10 * 60
FLEX_START_MAX_S = 7 * 24 * 3600


class Model(BaseModel):
    # strict: YAML reads `yes`/`on` as true and pydantic's lax mode reads true as 1, so `slices: yes` would make
    # one slice; every number and boolean must be written as one.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class TpuSpec(Model):
    model_config = ConfigDict(json_schema_extra=type_not_required)

    type: str = Field(description="Accelerator type, e.g. v3-8, v4-32, v5litepod-8 (not with pools).")
    runtime: str | None = Field(
        None,
        description="TPU VM runtime (e.g. tpu-vm-tf-2.16.1-pjrt) or, for mode: node, the Node's version "
        "(e.g. 2.12.0, pytorch-1.13). Default: the catalog's default for the generation and framework.",
    )
    mode: Literal["vm", "node"] = Field("vm", description="vm: TPU VM or pod slice; node: legacy TPU Node.")
    preemptible: bool = Field(False, description="Preemptible capacity: cheaper, and Google may stop it at any time "
                              "(TPU Research Cloud quota is often preemptible).")
    spot: bool = Field(False, description="Spot capacity: like preemptible, without its 24-hour limit.")
    queued: bool = Field(False, description="Create the TPU through a queued resource.")
    slices: int = Field(
        1, ge=1, le=64,
        description="Multislice: this many slices of `type`, joined over the data-center network, made by one "
        "queued resource (implies queued: true; v4, v5e, v5p, v6e).",
    )
    service_account: str | None = Field(
        None, description="Email the TPU VM runs as; default: the project's Compute default service account."
    )
    zones: list[str] = Field(
        default_factory=list,
        description="Fallback zones (same region as the bucket) tried in turn when the zone has no capacity.",
    )
    workers: int | None = Field(
        None, ge=1, le=64, description="provider: local only: number of simulated workers (default: hosts)."
    )
    network: str = Field("default", description="The VPC network of the TPU, the client VM and the guard VM.")
    subnetwork: str | None = Field(None, description="The subnetwork in the zone's region; default: Google's choice "
                                                   "for the network and region.")
    order: Literal["listed", "health"] = Field(
        "listed", description="With several pools: try them as listed, or healthiest first (fewest preemptions "
        "per day, then quickest to get capacity, from this machine's clusters' history; `tpuops quota` shows it).")
    move_after: MoveAfter = Field(
        DEFAULT_MOVE_AFTER,
        description="With several pools: how long recovery keeps failing to re-create the TPU in its own pool "
        "before it moves the run to the next pool (a duration like 15m).")
    pools: list[PoolSpec] = Field(
        default_factory=list, min_length=1,
        description="Where the TPU may run, in order of preference: each {type, zone, provisioning, runtime, "
        "reservation}. Replaces type, runtime, spot, preemptible and zones (and the top-level zone).",
    )

    @model_validator(mode="before")
    @classmethod
    def _first_pool(cls, data: Any) -> Any:
        return first_pool_fields(data)
    api: Literal["tpu", "compute"] | None = Field(
        None, description="Which Google API makes the TPU: tpu (the Cloud TPU API) or compute (Compute Engine VMs: "
        "TPU7x and later, also v5p and v6e). Default: compute for tpu7x, tpu elsewhere.")
    flex_start: str | None = Field(
        None, description="api: compute only: flex-start VMs that Compute Engine deletes after this run time "
        "(10m to 7d, e.g. 3d).")
    reservation: str | None = Field(
        None, description="api: compute only: consume this reservation (reservation-bound VMs, deleted when it ends).")

    @field_validator("flex_start")
    @classmethod
    def _run_time(cls, value: str | None) -> str | None:
        if value is not None and not FLEX_START_MIN_S <= run_time_seconds(value) <= FLEX_START_MAX_S:
            raise ValueError(f"flex_start {value!r} is outside 10m..7d, the run times flex-start allows")
        return value

    @property
    def flex_start_seconds(self) -> int | None:
        return None if self.flex_start is None else int(run_time_seconds(self.flex_start))

    @model_validator(mode="after")
    def _reservation_is_queued(self) -> TpuSpec:
        reserved = [index for index, pool in enumerate(self.pools) if pool.reservation]
        if reserved and not self.through_queue:
            raise ValueError(f"tpu.pools.{reserved[0]}.reservation: a TPU is created from a reservation through a "
                             "queued resource: set tpu.queued: true")
        return self

    @property
    def through_queue(self) -> bool:
        """Created through a queued resource: asked for, or Multislice (which only a queued resource makes)."""
        return self.queued or self.slices > 1

    @property
    def multislice(self) -> bool:
        return self.slices > 1

    @field_validator("service_account")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is not None and "@" not in value:
            raise ValueError(f"service_account must be an email address, got {value!r}")
        return value


class ClientVmSpec(Model):
    machine_type: str = Field("n1-standard-2", description="The client VM's Compute Engine machine type.")
    disk_gb: int = Field(50, ge=10, le=65536, description="The client VM's boot disk, in GB.")
    image_project: str = Field("debian-cloud", description="The project of the client VM's image family.")
    image_family: str = Field("debian-12", description="The client VM's image family (its newest image is used).")


class BucketSpec(Model):
    name: str = Field(description="The GCS bucket for data, logs and tpuops' records (GCS naming rules); created "
                                  "by `up` if missing.")
    location: str | None = Field(None, description="Default: the TPU zone's region.")

    @field_validator("name")
    @classmethod
    def _gcs_name(cls, value: str) -> str:
        problem = bucket_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class CodeSpec(Model):
    path: str = Field(".", description="The directory pushed to every worker (relative to the spec file).")
    exclude: list[str] = Field(default_factory=list, description=".gitignore-style patterns not pushed.")


class DataItem(Model):
    from_: str = Field(alias="from", description="Local file or directory.")
    to: str = Field(description="gs://bucket/prefix, or a path on every worker.")


class TrainerSpec(Model):
    framework: Literal["tensorflow", "pytorch", "jax"] = Field(
        description="tensorflow, pytorch (PyTorch/XLA) or jax: decides the environment the trainer gets "
        "(TPU_NAME, PJRT_DEVICE, XRT_TPU_CONFIG, ...).")
    setup: str | None = Field(None, description="Run once per worker (again when its text changes).")
    command: str = Field(description="The trainer's command line, run on every worker from the pushed code "
                                     "directory.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for setup and "
                                                                  "the trainer (names and values as strings).")
    checkpoints: str | None = Field(
        None, description="Where the run checkpoints (gs://BUCKET/PATH, in the spec's bucket): handed to the "
        "trainer as TPUOPS_CHECKPOINT_DIR with the TPU's region's bucket in it, and copied to the next region's "
        "bucket before a run moves there.")

    @field_validator("checkpoints")
    @classmethod
    def _gcs_checkpoints(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("gs://"):
            raise ValueError(f"trainer.checkpoints must be a gs://BUCKET/PATH URL, got {value!r}")
        return value

    @field_validator("command")
    @classmethod
    def _something_to_run(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("trainer.command is empty: a run would start nothing and report success")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return env_names(value)


class LogsSpec(Model):
    tensorboard: str | None = Field(None, description="Where the trainer writes TensorBoard events.")


class SshSpec(Model):
    user: str | None = Field(None, description="Default: the local user name.")
    port: int = Field(22, ge=1, le=65535, description="The workers' SSH port.")


class Spec(Model):
    name: str = Field(description="Cluster name: lowercase letters, digits, hyphens; starts with a letter; <= 40.")
    project: str | None = Field(None, description="Google Cloud project; default: --project, "
                                                  "CLOUDSDK_CORE_PROJECT, GOOGLE_CLOUD_PROJECT, gcloud's config.")
    provider: Literal["gcp", "local"] = Field("gcp", description="gcp: Google Cloud; local: the simulator on "
                                                                 "this machine (no Google account).")
    zone: str | None = Field(None, description="The TPU's zone, e.g. europe-west4-a (required for provider: gcp); "
                                               "the bucket goes to its region.")
    tpu: TpuSpec = Field(description="The TPU: type, runtime, mode, capacity and fallback zones.")
    client_vm: ClientVmSpec | None = Field(None, description="The Compute Engine VM that drives a legacy TPU Node "
                                                             "(required for tpu.mode: node).")
    bucket: BucketSpec | None = Field(None, description="The GCS bucket in the TPU's region, with the TPU's "
                                                        "service account granted on it.")
    code: CodeSpec = Field(default_factory=CodeSpec, description="The code pushed to every worker.")
    data: list[DataItem] = Field(default_factory=list, description="Data copied before a launch: each entry "
                                                                   "{from: local path, to: gs://... or a worker path}.")
    trainer: TrainerSpec | None = Field(None, description="What `launch` runs on every worker.")
    logs: LogsSpec = Field(default_factory=LogsSpec, description="Where the trainer's TensorBoard scalars are.")
    ssh: SshSpec = Field(default_factory=SshSpec, description="How tpuops reaches the workers over SSH.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels on every resource.")
    autostop: AutostopSpec = Field(
        default_factory=AutostopSpec, description="The cost guard on worker 0: delete the TPU when idle, or later."
    )
    watch: WatchSpec = Field(default_factory=WatchSpec, description="The hang watchdog of `tpuops watch`.")
    guard: GuardSpec = Field(default_factory=GuardSpec, description="Recovery that outlives the laptop.")
    check: CheckSpec = Field(default_factory=CheckSpec, description="How `tpuops check` runs the trainer here.")
    _bucket_pattern: str | None = PrivateAttr(None)  # bucket.name as written, when it holds {region}
    _home_bucket: str | None = PrivateAttr(None)  # placed in a pool: the first pool's bucket (see home_bucket)

    @model_validator(mode="wrap")
    @classmethod
    def _pools_and_regions(cls, data: Any, handler: Any) -> Spec:
        """The top-level zone is the first pool's; a bucket.name with {region} is that zone's region's bucket
        (what single-pool readers see), the pattern kept for the other pools (`bucket_for`)."""
        if not isinstance(data, dict):
            return handler(data)
        data, pattern = bucket_of_first_region(zone_of_first_pool(data), LOCAL_ZONE)
        spec = handler(data)
        spec._bucket_pattern = pattern
        return spec

    @field_validator("name")
    @classmethod
    def _cluster_name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError(
                f"cluster name {value!r} must be lowercase letters, digits and hyphens, start with a letter, "
                "not end with a hyphen, at most 40 characters"
            )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(val):
                raise ValueError(f"label {key}={val} breaks GCP label rules (lowercase, digits, - and _)")
            if key == CLUSTER_LABEL:
                raise ValueError(f"label {CLUSTER_LABEL} is set by tpuops itself")
        return value

    @model_validator(mode="before")
    @classmethod
    def _local_zone(cls, data: Any) -> Any:
        # The local provider has one zone, this machine; naming it keeps zone-based lookups uniform.
        if isinstance(data, dict) and data.get("provider") == "local" and not data.get("zone"):
            return {**data, "zone": LOCAL_ZONE}
        return data

    @model_validator(mode="after")
    def _zone_needed(self) -> Spec:
        if self.provider == "gcp" and not self.zone:
            raise ValueError("zone is required for provider: gcp (for example zone: europe-west4-a)")
        return self

    # Derived facts used across the tool.
    @property
    def region(self) -> str | None:
        return region_of(self.zone) if self.zone else None

    def pools(self) -> tuple[PoolSpec, ...]:
        """Where the TPU may run, in order: `tpu.pools`, or the single form as one pool."""
        return tuple(self.tpu.pools) or (single_pool(self.tpu, self.zone or LOCAL_ZONE),)

    def in_pool(self, pool: PoolSpec) -> Spec:
        """This spec as if it named only `pool`: its type, zone, provisioning and runtime, and its region's
        bucket, data and checkpoints; what `up`, `launch` and the guard work from once the TPU is placed there."""
        placed = self.model_copy(update=placed_fields(self, pool))
        placed._bucket_pattern = self._bucket_pattern
        placed._home_bucket = self.home_bucket
        return placed

    @property
    def home_bucket(self) -> str | None:
        """The first pool's region's bucket, wherever the TPU is: the guard's lease and ledger stay there, so a
        run that moves across regions keeps one history."""
        return self._home_bucket or (self.bucket.name if self.bucket else None)

    def pool_at(self, zone: str | None, accelerator_type: str | None = None) -> PoolSpec | None:
        """The pool a TPU in `zone` (of that type) belongs to: a fallback zone belongs to its single pool."""
        for pool in self.pools():
            if pool.zone == zone and accelerator_type in (None, pool.type):
                return pool
        return self.pools()[0] if not self.tpu.pools and zone in self.tpu.zones else None

    def checkpoints_for(self, region: str) -> str | None:
        """trainer.checkpoints with `region`'s bucket in it."""
        given = self.trainer.checkpoints if self.trainer else None
        return self.in_region(given, region) if given is not None else None

    def in_region(self, url: str, region: str) -> str:
        """A gs:// URL in the spec's bucket, moved to `region`'s bucket (spec/pools.py: url_in_region)."""
        return url_in_region(url, region, self.bucket.name if self.bucket else None, self.bucket_for(region))

    def bucket_for(self, region: str) -> str | None:
        """The bucket a TPU in `region` reads and writes: bucket.name, with {region} filled in when it has one."""
        if self.bucket is None:
            return None
        return self._bucket_pattern.replace(REGION_FIELD, region) if self._bucket_pattern else self.bucket.name

    @property
    def resource_labels(self) -> dict[str, str]:
        return {**self.labels, CLUSTER_LABEL: self.name}


def bucket_name_problem(name: str) -> str | None:
    """GCS bucket naming rules (the subset that applies to names without dots' domain verification)."""
    if not 3 <= len(name) <= 63:
        return f"bucket name {name!r} must be 3 to 63 characters"
    if not re.match(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$", name):
        return (
            f"bucket name {name!r} may hold only lowercase letters, digits, '-', '_' and '.', "
            "and must start and end with a letter or digit"
        )
    if name.startswith("goog") or "google" in name or "g00gle" in name:
        return f"bucket name {name!r} may not start with 'goog' or contain 'google'"
    if re.match(r"^\d+\.\d+\.\d+\.\d+$", name):
        return f"bucket name {name!r} may not be an IP address"
    return None


# ---------------------------------------------------------------------------------------------- loading


