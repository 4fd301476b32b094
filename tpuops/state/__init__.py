"""Local state: one directory per cluster under the user's config directory.

`state.json` is written before every create (so a crash leaves nothing `up` or `down` cannot find) and
holds no secrets: the spec stays in the user's file (its trainer.env may hold tokens) and only its path
is kept. The cluster's SSH key pair and pinned host keys live beside it.
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import re
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tpuops.atomic import write_atomic
from tpuops.errors import ClusterNotFound
from tpuops.keys import forget_host_keys, ssh_user
from tpuops.spec.autostop import AutostopSpec

if TYPE_CHECKING:
    from tpuops.spec import Spec


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def epoch_seconds(iso: str | None) -> float | None:
    """A time state recorded (ISO 8601, UTC when no zone is given) as seconds since the epoch; None if unreadable."""
    if not iso:
        return None
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def tpuops_home(env: dict[str, str] | os._Environ[str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("TPUOPS_HOME"):
        return Path(env["TPUOPS_HOME"])
    config = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "tpuops"


MOVED_EVENT = "moved"  # an event: recovery moved the run to another pool (its message says from, to and why)
PLACED_EVENT = "placed"  # an event: `up` placed the TPU in `pool`, after `seconds` (pool health's time to capacity)
PREEMPTED_EVENT = "preempted"  # an event: recovery found the TPU dead in `pool` (pool health's and churn's count)
# What `placed` and `preempted` events said in their message alone before they had `pool` and `seconds`.
OLD_PLACED_TEXT = re.compile(r"^in pool (?P<pool>.+) after (?P<seconds>\d+(?:\.\d+)?)s$")
OLD_PREEMPTED_MARK = " in pool "  # "<why> in pool LABEL"


class StateModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


ResourceKind = Literal["bucket", "iam", "tpu", "queued_resource", "compute_tpu", "client_vm", "guard_vm"]
# The kinds that are (or make) the cluster's TPU: a recovery deletes and creates one of them again.
TPU_KINDS: tuple[ResourceKind, ...] = ("tpu", "queued_resource", "compute_tpu")


class ResourceBase(StateModel):
    """One resource `up` created or adopted; each kind adds its own typed facts."""

    kind: ResourceKind
    name: str
    zone: str | None = None
    status: Literal["creating", "created", "deleting"] = "creating"
    updated_at: str = Field(default_factory=now_iso)

    @model_validator(mode="before")
    @classmethod
    def _from_detail(cls, data: Any) -> Any:
        """State written before the typed records kept these facts as text in `detail`."""
        if not isinstance(data, dict) or not isinstance(data.get("detail"), dict):
            return data
        facts = {key: value for key, value in data["detail"].items() if key != "tpu_endpoints"}
        endpoints = data["detail"].get("tpu_endpoints")
        if endpoints:  # "IP:8470,IP:8470"
            facts["node_ips"] = [e.rpartition(":")[0] for e in endpoints.split(",") if e]
        return {**facts, **{key: value for key, value in data.items() if key != "detail"}}


class BucketRecord(ResourceBase):
    kind: Literal["bucket"] = "bucket"
    location: str | None = None


class IamRecord(ResourceBase):
    """roles/... granted to `member` on the bucket `name`."""

    kind: Literal["iam"] = "iam"
    member: str | None = None
    role: str | None = None


class TpuRecord(ResourceBase):
    """A TPU, or the queued resource that makes it (`name` is then the queued resource's, `node` the TPU's), or a
    TPU made by Compute Engine (compute_tpu: one instance, or a slice whose `parts` are its policy and template)."""

    kind: Literal["tpu", "queued_resource", "compute_tpu"] = "tpu"
    node: str | None = None
    mode: Literal["vm", "node"] | None = None
    node_ips: list[str] = Field(default_factory=list, description="A legacy Node's hosts (gRPC on IP:8470).")
    created_at: str | None = None  # when `up` first saw the TPU ready (uptime, cost, autostop's max_hours)
    nodes: list[str] = Field(default_factory=list, description="Multislice: every slice's node, in slice order.")
    parts: list[str] = Field(default_factory=list, description="compute_tpu: what Compute Engine made besides the "
                             "group or instance (a slice's workload policy and instance template).")

    @property
    def node_name(self) -> str:
        return self.node or self.name

    @property
    def node_names(self) -> list[str]:
        """Every node this record stands for: each slice's with Multislice, else the one."""
        return self.nodes or [self.node_name]

    @property
    def queued_name(self) -> str | None:
        """The queued resource that made the TPU, if one did (deleting it, with force, deletes the TPU)."""
        return self.name if self.kind == "queued_resource" else None


class VmRecord(ResourceBase):
    """A legacy Node's client VM, or the guard VM that keeps the run alive (`tpuops guard up`)."""

    kind: Literal["client_vm", "guard_vm"] = "client_vm"


ResourceRecord = Annotated[BucketRecord | IamRecord | TpuRecord | VmRecord, Field(discriminator="kind")]
RECORD_TYPES: dict[ResourceKind, type[ResourceBase]] = {
    "bucket": BucketRecord, "iam": IamRecord, "tpu": TpuRecord, "queued_resource": TpuRecord, "compute_tpu": TpuRecord,
    "client_vm": VmRecord, "guard_vm": VmRecord,
}


class WorkerRecord(StateModel):
    index: int
    internal_ip: str
    external_ip: str | None = None
    ssh_host: str = Field(description="Address tpuops connects to (external IP, or internal on a VPN).")
    ssh_port: int = 22
    home: str | None = Field(None, description="provider: local: the worker's directory.")
    role: Literal["tpu", "client_vm"] = Field("tpu", description="client_vm: a legacy Node's driver VM.")
    slice: int = Field(0, description="Multislice: the slice this host belongs to.")
    slice_index: int | None = Field(None, description="Multislice: the host's index within its slice "
                                    "(`index` counts across slices); None for one slice.")

    @property
    def name(self) -> str:
        """How output and --worker name it: w3, s1w1 with Multislice, client for a legacy Node's client VM."""
        if self.role == "client_vm":
            return "client"
        return f"s{self.slice}w{self.slice_index}" if self.slice_index is not None else f"w{self.index}"


class EventRecord(StateModel):
    at: str = Field(default_factory=now_iso)
    kind: str
    message: str
    by: str | None = None  # who acted: "the guard", "`tpuops watch`" (None: a command, or an older state)
    pool: str | None = None  # the pool's label: placed or preempted there, moved there (None: no pool, or no fact)
    seconds: float | None = None  # placed: how long getting the TPU there took

    @model_validator(mode="before")
    @classmethod
    def _facts_from_text(cls, data: Any) -> Any:
        """State written before `pool` and `seconds` kept them in the message only: the one place that reads it."""
        if not isinstance(data, dict) or data.get("pool") is not None or not isinstance(data.get("message"), str):
            return data
        message = data["message"]
        if data.get("kind") == PLACED_EVENT and (match := OLD_PLACED_TEXT.match(message)):
            return {**data, "pool": match["pool"], "seconds": float(match["seconds"])}
        if data.get("kind") == PREEMPTED_EVENT and OLD_PREEMPTED_MARK in message:
            return {**data, "pool": message.rsplit(OLD_PREEMPTED_MARK, 1)[1]}
        return data


class RunRecord(StateModel):
    """One launch of the trainer; `worker_states` holds running | exited N | killed | lost per worker."""

    id: str
    command: str
    started_at: str = Field(default_factory=now_iso)
    workers: list[str] = Field(default_factory=list)
    worker_states: dict[str, str] = Field(default_factory=dict)
    restart: int = 0


class ClusterState(StateModel):
    name: str
    provider: Literal["gcp", "local"]
    project: str | None = None
    zone: str | None = None
    pool: str | None = None  # with tpu.pools: the pool the TPU is in (its label, `v6e-8 spot in europe-west4-a`)
    spec_path: str
    resources: list[ResourceRecord] = Field(default_factory=list)
    # Every bucket recorded for the cluster, in order: with tpu.pools and {region} a run that moved has one per
    # region, while `resources` holds the current one only. `down --delete-bucket` deletes these and no other.
    buckets: list[str] = Field(default_factory=list)
    workers: list[WorkerRecord] = Field(default_factory=list)
    ssh_user: str | None = None
    autostop: AutostopSpec | None = None  # set by `up --autostop` / `tpuops autostop`: wins over the spec's
    events: list[EventRecord] = Field(default_factory=list)
    runs: list[RunRecord] = Field(default_factory=list)
    created_at: str = Field(default_factory=now_iso)
    updated_at: str = Field(default_factory=now_iso)

    def resource(self, kind: ResourceKind) -> ResourceRecord | None:
        return next((r for r in self.resources if r.kind == kind), None)

    def tpu_record(self) -> TpuRecord | None:
        """The TPU's record, or its queued resource's."""
        return next((r for r in self.resources if isinstance(r, TpuRecord)), None)

    def set_resource(self, record: ResourceRecord) -> None:
        self.resources = [r for r in self.resources if r.kind != record.kind] + [record]
        if record.kind == "bucket" and record.name not in self.buckets:
            self.buckets.append(record.name)

    def recorded_buckets(self) -> list[str]:
        """Every bucket recorded for the cluster (a state written before `buckets` existed: its current one)."""
        current = self.resource("bucket")
        return list(dict.fromkeys([*self.buckets, *([current.name] if current else [])]))

    def drop_resource(self, kind: ResourceKind) -> None:
        self.resources = [r for r in self.resources if r.kind != kind]

    def login_user(self, configured: str | None = None) -> str:
        """Who logs in on the workers: the user `up` recorded, else `configured` (the spec's ssh.user), else the
        local user (as `up` would have recorded it)."""
        return self.ssh_user or ssh_user(configured)

    @property
    def current_run(self) -> RunRecord | None:
        return self.runs[-1] if self.runs else None

    def run(self, run_id: str | None) -> RunRecord | None:
        if run_id is None:
            return self.current_run
        return next((r for r in self.runs if r.id == run_id), None)

    def log(self, kind: str, message: str, by: str | None = None, pool: str | None = None,
            seconds: float | None = None) -> None:
        self.events.append(EventRecord(kind=kind, message=message, by=by, pool=pool, seconds=seconds))


class StateStore:
    """Reads and atomically writes cluster state under `home/clusters/NAME/`."""

    def __init__(self, home: Path) -> None:
        self.home = home
        # A thread's last observation (a follow ending as `run --down` deletes the cluster) must not write back a
        # record another thread of this process just deleted: `remember` and `delete` take turns.
        self._deleting = threading.Lock()

    def cluster_dir(self, name: str) -> Path:
        return self.home / "clusters" / name

    def path(self, name: str) -> Path:
        return self.cluster_dir(name) / "state.json"

    def load(self, name: str) -> ClusterState | None:
        try:
            return ClusterState.model_validate_json(self.path(name).read_text())
        except FileNotFoundError:
            return None

    def require(self, name: str) -> ClusterState:
        state = self.load(name)
        if state is None:
            close = difflib.get_close_matches(name, self.names(), n=1)
            guess = f" (did you mean {close[0]}?)" if close else ""
            raise ClusterNotFound(
                f"no cluster named '{name}' here{guess}", "run `tpuops status` to list clusters, or `tpuops up SPEC`"
            )
        return state

    def forget_workers(self, state: ClusterState) -> None:
        """The TPU's hosts are gone: their addresses and pinned host keys must not be trusted for new ones."""
        forget_host_keys(self.cluster_dir(state.name))
        state.workers = []
        self.save(state)

    def save(self, state: ClusterState) -> None:
        state.updated_at = now_iso()
        directory = self.cluster_dir(state.name)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(self.path(state.name), json.dumps(state.model_dump(mode="json"), indent=2), fsync=True)

    def remember(self, state: ClusterState) -> bool:
        """Save what a read-only command only observed (`status` refreshing run states): with the disk full or
        read-only it is not worth failing the command for, and of a cluster deleted meanwhile it is moot; False
        when it was not written."""
        with self._deleting:
            if not self.path(state.name).exists():
                return False
            try:
                self.save(state)
            except OSError as err:
                if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                    raise
                return False
        return True

    def delete(self, name: str) -> None:
        with self._deleting:
            self.path(name).unlink(missing_ok=True)

    def names(self) -> list[str]:
        root = self.home / "clusters"
        if not root.is_dir():
            return []
        return sorted(p.parent.name for p in root.glob("*/state.json"))


def bucket_of(state: ClusterState | None, spec: Spec | None) -> str | None:
    """The cluster's bucket: as recorded by `up`, else as the spec names it."""
    record = state.resource("bucket") if state else None
    if isinstance(record, BucketRecord):
        return record.name
    return spec.bucket.name if spec is not None and spec.bucket else None


def record_prefix(bucket: str, cluster: str) -> str:
    """Where tpuops keeps a cluster's records in its bucket (the autostop agent's, the guard's lease, ledger and
    state copy), next to nothing else of the user's."""
    return f"gs://{bucket}/.tpuops/{cluster}"
