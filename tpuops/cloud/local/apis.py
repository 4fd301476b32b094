"""The cloud interface on this machine: every resource is a small JSON record under `root`, a worker is a
directory standing for that host's home, and a bucket is a directory standing for gs://NAME.

A TPU is created, refused for a stockout and deleted as a Compute Engine TPU is (lifecycle.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tpuops import catalog
from tpuops.atomic import write_atomic
from tpuops.cloud.base import Bucket, HostKey, QueuedResource, TpuNode, TpuRequest, Vm, VmRequest, Worker, ZoneOffer
from tpuops.cloud.local.layout import LOOPBACK, bucket_path
from tpuops.cloud.local.lifecycle import (
    create_through_creating,
    delete_tpu,
    stock_out,
    stop_processes_under,
    workers_dir,
)
from tpuops.cloud.local.search import LocalSearch
from tpuops.errors import CloudError


class LocalCloud(LocalSearch):
    def __init__(self, root: Path) -> None:
        self.root = root

    # -------------------------------------------------------------------------------------- layout
    def _record(self, kind: str, name: str) -> Path:
        return self.root / kind / f"{name}.json"

    def worker_home(self, node: str, index: int) -> Path:
        return self.root / "workers" / node / f"w{index}"

    def bucket_dir(self, name: str) -> Path:
        return bucket_path(self.root, f"gs://{name}")

    def _read(self, kind: str, name: str) -> dict | None:
        try:
            return json.loads(self._record(kind, name).read_text())
        except FileNotFoundError:
            return None
        except ValueError as err:  # as a cloud API that answers garbage: an error of the call, not a verdict
            raise CloudError(f"the simulator's {kind} record {name} is unreadable: {err}") from err

    def _write(self, kind: str, name: str, data: Mapping[str, object]) -> None:
        path = self._record(kind, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, indent=2))

    def _all(self, kind: str) -> Iterator[dict]:
        for path in sorted((self.root / kind).glob("*.json")):
            yield json.loads(path.read_text())

    # ---------------------------------------------------------------------------------------- TPUs
    def get_node(self, zone: str, name: str) -> TpuNode | None:
        record = self._read("tpus", name)
        return self._node(record) if record else None

    def list_nodes(self, zone: str) -> list[TpuNode]:
        return [self._node(record) for record in self._all("tpus")]

    def create_node(self, request: TpuRequest) -> TpuNode:
        accelerator = catalog.load().accelerator(request.accelerator_type)
        if accelerator is None:
            raise CloudError(f"unknown accelerator type {request.accelerator_type}")
        workers = request.workers or accelerator.hosts
        record = {"name": request.name, "zone": request.zone, "accelerator_type": request.accelerator_type,
                  "mode": request.mode, "runtime": request.runtime, "workers": workers,
                  "labels": dict(request.labels), "state": "READY", "spot": request.spot,
                  "preemptible": request.preemptible}
        made = create_through_creating(self.root, request.name, request.zone,
                                       lambda data: self._write("tpus", request.name, data),
                                       {**record, "state": "CREATING"}, record,
                                       [self.worker_home(request.name, index) for index in range(workers)])
        return self._node(dict(made))

    def delete_node(self, zone: str, name: str) -> None:
        delete_tpu(self.root, name, self._record("tpus", name))

    def stock_out(self, zone: str, seconds: float) -> None:
        """`zone` refuses to create TPUs for `seconds` (0: has capacity again at once)."""
        stock_out(self.root, zone, seconds)

    def preempt_node(self, name: str) -> None:
        """A preemption: every process of the node's workers ends, the record reads PREEMPTED (the homes stay,
        as a preempted TPU keeps its name until it is deleted)."""
        record = self._read("tpus", name)
        if record is None:
            raise CloudError(f"no simulated TPU named {name}")
        stop_processes_under(workers_dir(self.root, name))
        self._write("tpus", name, {**record, "state": "PREEMPTED"})

    def host_keys(self, zone: str, name: str) -> list[HostKey]:
        return []  # local workers are not reached over SSH

    def zone_offer(self, zone: str) -> ZoneOffer:
        """The simulator offers every type the catalog knows and runs any runtime (it runs none)."""
        return ZoneOffer(zone, "vm", tuple(catalog.load().all_types()), (), any_runtime=True)

    def _node(self, record: dict) -> TpuNode:
        workers = tuple(Worker(index, LOOPBACK, None, str(self.worker_home(record["name"], index)))
                        for index in range(record["workers"]))
        return TpuNode(name=record["name"], zone=record["zone"], accelerator_type=record["accelerator_type"],
                       state=record["state"], mode=record["mode"], health="HEALTHY", runtime=record["runtime"],
                       workers=workers, service_account=None, labels=record["labels"],
                       spot=record.get("spot", False), preemptible=record.get("preemptible", False))

    # ---------------------------------------------------------------- queued resources (granted at once)
    def get_queued(self, zone: str, name: str) -> QueuedResource | None:
        record = self._read("queued", name)
        return queued_from(record) if record else None

    def list_queued(self, zone: str) -> list[QueuedResource]:
        return [queued_from(record) for record in self._all("queued")]

    def create_queued(self, name: str, request: TpuRequest, wait_seconds: float,
                      valid_until: float | None = None) -> QueuedResource:
        if request.slices > 1:
            raise CloudError("the local provider simulates one slice", "use the GCP provider for Multislice")
        self.create_node(request)  # granted at once: `valid_until` can never pass
        queued = QueuedResource(name, request.zone, "ACTIVE", request.name, dict(request.labels),
                                node_names=(request.name,), accelerator_type=request.accelerator_type,
                                spot=request.spot or request.preemptible)
        self._write("queued", name, asdict(queued))
        return queued

    def delete_queued(self, zone: str, name: str) -> None:
        queued = self.get_queued(zone, name)
        if queued and queued.node_name:
            self.delete_node(zone, queued.node_name)
        self._record("queued", name).unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------ VMs
    def get_vm(self, zone: str, name: str) -> Vm | None:
        record = self._read("vms", name)
        return Vm(**record) if record else None

    def list_vms(self, zone: str) -> list[Vm]:
        return [Vm(**record) for record in self._all("vms")]

    def create_vm(self, request: VmRequest) -> Vm:
        vm = Vm(request.name, request.zone, "RUNNING", LOOPBACK, None, dict(request.labels))
        self.worker_home(request.name, 0).mkdir(parents=True, exist_ok=True)
        self._write("vms", request.name, asdict(vm))
        return vm

    def start_vm(self, zone: str, name: str) -> Vm:
        record = self._read("vms", name) or {}
        vm = Vm(**{**record, "state": "RUNNING"})
        self._write("vms", name, asdict(vm))
        return vm

    def delete_vm(self, zone: str, name: str) -> None:
        self.delete_node(zone, name)
        self._record("vms", name).unlink(missing_ok=True)

    # -------------------------------------------------------------------------------------- buckets
    def get_bucket(self, name: str) -> Bucket | None:
        record = self._read("bucket-meta", name)
        return Bucket(**record) if record else None

    def create_bucket(self, name: str, location: str, labels: Mapping[str, str]) -> Bucket:
        self.bucket_dir(name).mkdir(parents=True, exist_ok=True)
        bucket = Bucket(name, location.upper(), dict(labels))
        self._write("bucket-meta", name, asdict(bucket))
        return bucket

    def bucket_is_empty(self, name: str) -> bool:
        directory = self.bucket_dir(name)
        return not directory.is_dir() or not any(directory.iterdir())

    def delete_bucket(self, name: str, force: bool = False) -> None:
        if not force and not self.bucket_is_empty(name):
            raise CloudError(f"bucket {name} is not empty", "pass --force to delete it with its objects")
        shutil.rmtree(self.bucket_dir(name), ignore_errors=True)
        self._record("bucket-meta", name).unlink(missing_ok=True)

    def bucket_members(self, name: str, role: str) -> frozenset[str]:
        return frozenset()

    def grant_on_bucket(self, name: str, member: str, role: str) -> bool:
        return False  # one local user owns everything: there is no one to grant

    def default_service_account(self) -> str:
        return "local"


def queued_from(record: dict[str, Any]) -> QueuedResource:
    """A queued resource as written by create_queued (records from before Multislice have no node_names)."""
    names = tuple(record.pop("node_names", None) or ([record["node_name"]] if record.get("node_name") else []))
    return QueuedResource(**record, node_names=names)
