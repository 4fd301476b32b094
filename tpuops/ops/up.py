"""`tpuops up`: observe what exists, plan (the same plan `tpuops plan` prints), then create or adopt.

Independent resources are created in parallel: the bucket (then its IAM grant), the TPU (or queued
resource), the client VM. The state file is saved before every create, so an interrupted `up` leaves
nothing that `up` (resumes) or `down` (deletes) cannot find.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from tpuops import catalog, keys, retry
from tpuops.cloud.base import Cloud, TpuNode, TpuRequest, VmRequest
from tpuops.context import Context
from tpuops.errors import CapacityError, CloudError
from tpuops.ops.specs import load_checked
from tpuops.plan import (
    IAM_ROLE,
    Action,
    ObservedResource,
    Plan,
    client_vm_name,
    make_plan,
    queued_resource_name,
    tpu_name,
)
from tpuops.spec import CLUSTER_LABEL, Spec
from tpuops.state import ClusterState, ResourceRecord, WorkerRecord

T = TypeVar("T")
Progress = Callable[[str, str, str], None]  # (kind, name, what is happening)
READY = "READY"


@dataclass(frozen=True)
class UpResult:
    cluster: str
    plan: Plan
    done: tuple[Action, ...]  # the creates and recreates carried out
    workers: tuple[WorkerRecord, ...]
    known_hosts: str | None

    @property
    def created_nothing(self) -> bool:
        return not self.done

    def as_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "created": [asdict(a) for a in self.done],
            "kept": [asdict(a) for a in self.plan.actions if a.verb == "keep"],
            "workers": [w.model_dump() for w in self.workers],
            "known_hosts": self.known_hosts,
            "warnings": list(self.plan.warnings),
        }


def up(
    ctx: Context, spec_path: str | Path, wait_for_capacity: float = 0.0, progress: Progress | None = None
) -> UpResult:
    spec = load_checked(spec_path)
    project = ctx.require_project(spec) if spec.provider == "gcp" else None
    cloud = ctx.cloud_for(spec, project)
    return UpRun(ctx, spec, Path(spec_path).resolve(), cloud, project, wait_for_capacity, progress).execute()


def candidate_zones(spec: Spec, state: ClusterState | None, kind: str) -> list[str]:
    """Where a TPU of this cluster may be: where state says, the spec's zone, then its fallback zones."""
    recorded = state.resource(kind) if state else None
    zones = [recorded.zone if recorded else None, spec.zone, *spec.tpu.zones]
    return list(dict.fromkeys(zone for zone in zones if zone))


def owned(labels: object, spec: Spec) -> bool:
    return isinstance(labels, dict) and labels.get(CLUSTER_LABEL) == spec.name


class UpRun:
    def __init__(
        self,
        ctx: Context,
        spec: Spec,
        spec_path: Path,
        cloud: Cloud,
        project: str | None,
        wait_for_capacity: float,
        progress: Progress | None,
    ) -> None:
        self.ctx = ctx
        self.spec = spec
        self.cloud = cloud
        self.project = project
        self.wait_for_capacity = wait_for_capacity
        self.progress = progress or (lambda kind, name, text: None)
        self.poll_interval = float(ctx.env.get("TPUOPS_POLL_INTERVAL", "5"))
        self.operation_timeout = float(ctx.env.get("TPUOPS_OPERATION_TIMEOUT", "1800"))
        self.capacity_backoff = float(ctx.env.get("TPUOPS_CAPACITY_BACKOFF", "30"))
        self.lock = threading.Lock()
        self.state = ctx.store.load(spec.name) or ClusterState(
            name=spec.name, provider=spec.provider, project=project, zone=spec.zone, spec_path=str(spec_path)
        )
        self.state.spec_path = str(spec_path)
        self.node: TpuNode | None = None  # the TPU once observed or created
        self.member: str | None = None  # who gets objectAdmin on the bucket

    # ------------------------------------------------------------------------------------- overview
    def execute(self) -> UpResult:
        plan = make_plan(self.spec, self.observe(), self.project)
        directory = self.ctx.store.cluster_dir(self.spec.name)
        self.key = keys.ensure_key_pair(directory, self.spec.name)
        self.user = keys.ssh_user(self.spec.ssh.user)
        self.ssh_keys = keys.ssh_keys_metadata(self.user, self.key)
        with self.lock:
            self.state.ssh_user = self.user
            self.ctx.store.save(self.state)
        for action in plan.actions:
            self.progress(action.kind, action.name, "planned: " + action.verb)
        self.run_in_parallel(plan)
        workers, known_hosts = self.record_workers()
        return UpResult(self.spec.name, plan, plan.changes, workers, known_hosts)

    def run_in_parallel(self, plan: Plan) -> None:
        by_kind = {action.kind: action for action in plan.actions}
        needs_tpu_zone = bool(self.spec.tpu.zones) and "client_vm" in by_kind
        # Not a `with` block: on Ctrl-C the caller must get control back at once (state is already saved).
        pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="up")
        try:
            tpu_kind = "queued_resource" if self.spec.tpu.queued else "tpu"
            tpu_done = pool.submit(self.ensure_tpu, by_kind[tpu_kind])
            storage_done = pool.submit(self.ensure_storage, by_kind.get("bucket"), by_kind.get("iam"))
            futures: list[Future[object]] = [tpu_done, storage_done]  # type: ignore[list-item]
            if "client_vm" in by_kind:
                vm_action = by_kind["client_vm"]
                if needs_tpu_zone:  # the VM must sit in the zone the TPU found capacity in
                    futures.append(pool.submit(self.after, [tpu_done], lambda: self.ensure_vm(vm_action)))
                else:
                    futures.append(pool.submit(self.ensure_vm, vm_action))
            if self.spec.tpu.mode == "node" and "iam" in by_kind:  # the Node's identity is known once it exists
                futures.append(
                    pool.submit(self.after, [tpu_done, storage_done], lambda: self.ensure_iam(by_kind["iam"]))
                )
            wait(futures)  # all finish (and record their state) before we report the first error
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]  # type: ignore[misc]

    @staticmethod
    def after(dependencies: Sequence[Future[object]], then: Callable[[], T]) -> T:
        for dependency in dependencies:
            dependency.result()
        return then()

    # -------------------------------------------------------------------------------------- observe
    def observe(self) -> list[ObservedResource]:
        spec, cloud = self.spec, self.cloud
        observed: list[ObservedResource] = []
        if spec.tpu.queued:
            observed += self.observe_queued()
        else:
            observed += self.observe_tpu()
        if spec.client_vm:
            vm = cloud.vms.get_vm(self.vm_zone(), client_vm_name(spec))
            if vm is not None:
                observed.append(ObservedResource("client_vm", vm.name, vm.state, owned(vm.labels, spec), vm.zone))
        if spec.bucket:
            bucket = cloud.storage.get_bucket(spec.bucket.name)
            if bucket is not None:
                is_ours = owned(bucket.labels, spec)
                observed.append(ObservedResource("bucket", bucket.name, "exists", is_ours))
                member = self.bucket_member() if is_ours and spec.provider == "gcp" else None
                if member and member in cloud.storage.bucket_members(bucket.name, IAM_ROLE):
                    observed.append(ObservedResource("iam", bucket.name, "granted"))
        return observed

    def observe_tpu(self) -> list[ObservedResource]:
        api = self.cloud.tpu_api(self.spec.tpu.mode)
        for zone in candidate_zones(self.spec, self.state, "tpu"):
            node = api.get_node(zone, tpu_name(self.spec))
            if node is not None:
                self.node = node
                return [ObservedResource("tpu", node.name, node.state, owned(node.labels, self.spec), zone)]
        return []

    def observe_queued(self) -> list[ObservedResource]:
        name = queued_resource_name(self.spec)
        for zone in candidate_zones(self.spec, self.state, "queued_resource"):
            queued = self.cloud.queued.get_queued(zone, name)
            if queued is not None:
                self.node = self.cloud.tpus.get_node(zone, tpu_name(self.spec))
                is_ours = owned(queued.labels, self.spec)
                return [ObservedResource("queued_resource", name, queued.state, is_ours, zone)]
        return []

    def bucket_member(self) -> str | None:
        """The identity the TPU reads and writes GCS as (None while a legacy Node does not exist yet)."""
        if self.member is None:
            if self.spec.tpu.mode == "node":
                if self.node is None or not self.node.service_account:
                    return None
                self.member = f"serviceAccount:{self.node.service_account}"
            else:
                email = self.spec.tpu.service_account or self.cloud.projects.default_service_account()
                self.member = f"serviceAccount:{email}"
        return self.member

    # -------------------------------------------------------------------------------------- storage
    def ensure_storage(self, bucket: Action | None, iam: Action | None) -> None:
        if bucket is None:
            return
        if bucket.verb == "create":
            location = (self.spec.bucket.location or self.spec.region or "").upper()  # type: ignore[union-attr]
            self.record("bucket", bucket.name, None, "creating", {"location": location})
            self.progress("bucket", bucket.name, f"creating in {location}")
            self.cloud.storage.create_bucket(bucket.name, location, self.spec.resource_labels)
        self.record("bucket", bucket.name, None, "created")
        self.progress("bucket", bucket.name, "ready")
        if iam is not None and self.spec.tpu.mode != "node":
            self.ensure_iam(iam)

    def ensure_iam(self, iam: Action) -> None:
        member = self.bucket_member()
        if member is None:
            raise CloudError("the TPU Node reports no service account to grant on the bucket", "rerun `tpuops up`")
        if iam.verb == "create":
            self.progress("iam", iam.name, f"granting {IAM_ROLE} to {member}")
            self.cloud.storage.grant_on_bucket(iam.name, member, IAM_ROLE)
        self.record("iam", iam.name, None, "created", {"member": member, "role": IAM_ROLE})
        self.progress("iam", iam.name, f"{member} has {IAM_ROLE}")

    # ------------------------------------------------------------------------------------------ TPU
    def ensure_tpu(self, action: Action) -> None:
        if action.verb == "recreate":
            self.delete_dead_tpu(action)
        if action.verb in ("create", "recreate"):
            self.node = self.create_with_capacity_retry(action)
        else:
            self.node = self.wait_tpu_ready(action)
        self.progress(action.kind, action.name, f"{self.node.state} in {self.node.zone}")

    def delete_dead_tpu(self, action: Action) -> None:
        zone = action.zone or self.spec.zone or ""
        self.record(action.kind, action.name, zone, "deleting")
        self.progress(action.kind, action.name, f"deleting ({action.reason})")
        if action.kind == "queued_resource":
            self.cloud.queued.delete_queued(zone, action.name)
        else:
            self.cloud.tpu_api(self.spec.tpu.mode).delete_node(zone, action.name)
        self.forget_workers()

    def create_with_capacity_retry(self, action: Action) -> TpuNode:
        zones = list(dict.fromkeys([self.spec.zone or "", *self.spec.tpu.zones]))

        def try_every_zone() -> TpuNode:
            failures: list[str] = []
            for zone in zones:
                try:
                    return self.create_tpu_in(action, zone)
                except CapacityError as err:
                    failures.append(f"{zone}: {err.message}")
                    self.progress(action.kind, action.name, f"no capacity in {zone}")
            raise CapacityError(
                f"no capacity for {self.spec.tpu.type} ({'; '.join(failures)})",
                "rerun with --wait-for-capacity 2h to keep trying, or add zones in the region to tpu.zones",
            )

        if self.wait_for_capacity <= 0:
            return try_every_zone()
        policy = retry.bounded_by(self.wait_for_capacity, initial=self.capacity_backoff, retry_on=CapacityError)
        return policy(try_every_zone)

    def create_tpu_in(self, action: Action, zone: str) -> TpuNode:
        request = self.tpu_request(zone)
        self.record(action.kind, action.name, zone, "creating", {"node": request.name, "mode": request.mode})
        self.progress(action.kind, action.name, f"creating in {zone}")
        if action.kind == "queued_resource":
            wait_seconds = self.wait_for_capacity or self.operation_timeout
            try:
                self.cloud.queued.create_queued(action.name, request, wait_seconds)
            except CapacityError:
                # A FAILED queued resource keeps holding quota: delete it before trying elsewhere or later.
                self.progress(action.kind, action.name, f"failed in {zone}: deleting it")
                self.cloud.queued.delete_queued(zone, action.name)
                raise
            node = self.wait_node_ready(zone, request.name)
        else:
            node = self.cloud.tpu_api(self.spec.tpu.mode).create_node(request)
        self.record(action.kind, action.name, zone, "created", {"node": node.name, "mode": node.mode})
        return node

    def wait_tpu_ready(self, action: Action) -> TpuNode:
        """A kept TPU: still CREATING after an interrupted `up`, or a queued resource still waiting."""
        zone = action.zone or self.spec.zone or ""
        if action.kind == "queued_resource":
            self.progress(action.kind, action.name, "waiting for the queued resource to become ACTIVE")
            self.poll(
                lambda: self.cloud.queued.get_queued(zone, action.name),
                lambda q: q is not None and q.state == "ACTIVE",
                f"queued resource {action.name}",
                self.wait_for_capacity or None,
            )
        node = self.wait_node_ready(zone, tpu_name(self.spec))
        self.record(action.kind, action.name, zone, "created", {"node": node.name, "mode": node.mode})
        return node

    def wait_node_ready(self, zone: str, name: str) -> TpuNode:
        api = self.cloud.tpu_api(self.spec.tpu.mode)
        node = self.poll(
            lambda: api.get_node(zone, name), lambda n: n is None or n.state != "CREATING", f"TPU {name} to be ready"
        )
        if node is None:
            raise CloudError(f"TPU {name} disappeared while it was being created", "rerun `tpuops up`")
        if node.state != READY:
            raise CloudError(f"TPU {name} is {node.state}, not READY", "run `tpuops down` then `tpuops up`")
        return node

    def tpu_request(self, zone: str) -> TpuRequest:
        tpu = self.spec.tpu
        framework = self.spec.trainer.framework if self.spec.trainer else None
        cat = catalog.load()
        accelerator = cat.accelerator(tpu.type)
        runtime = tpu.runtime or (cat.default_runtime(accelerator, tpu.mode, framework) if accelerator else None)
        return TpuRequest(
            name=tpu_name(self.spec),
            zone=zone,
            accelerator_type=tpu.type,
            runtime=runtime or "",
            mode=tpu.mode,
            preemptible=tpu.preemptible,
            spot=tpu.spot,
            service_account=tpu.service_account,
            network=tpu.network,
            subnetwork=tpu.subnetwork,
            labels=self.spec.resource_labels,
            ssh_keys=self.ssh_keys if tpu.mode == "vm" else None,
            workers=tpu.workers if self.spec.provider == "local" else None,
        )

    # ------------------------------------------------------------------------------------ client VM
    def vm_zone(self) -> str:
        return self.node.zone if self.node is not None else (self.spec.zone or "")

    def ensure_vm(self, action: Action) -> None:
        vm_spec = self.spec.client_vm
        assert vm_spec is not None
        zone = self.vm_zone() if action.verb != "keep" else (action.zone or self.vm_zone())
        if action.verb == "create":
            self.record("client_vm", action.name, zone, "creating")
            self.progress("client_vm", action.name, f"creating in {zone}")
            request = VmRequest(
                name=action.name,
                zone=zone,
                machine_type=vm_spec.machine_type,
                disk_gb=vm_spec.disk_gb,
                image_project=vm_spec.image_project,
                image_family=vm_spec.image_family,
                network=self.spec.tpu.network,
                subnetwork=self.spec.tpu.subnetwork,
                labels=self.spec.resource_labels,
                ssh_keys=self.ssh_keys,
            )
            self.cloud.vms.create_vm(request)
        self.record("client_vm", action.name, zone, "created")
        self.progress("client_vm", action.name, "ready")

    # ------------------------------------------------------------------------------ workers & state
    def record_workers(self) -> tuple[tuple[WorkerRecord, ...], str | None]:
        """Workers tpuops connects to (the TPU VM hosts, or a legacy Node's client VM) and their host keys."""
        port = self.spec.ssh.port
        node = self.node
        assert node is not None
        if self.spec.tpu.mode == "node":
            vm = self.cloud.vms.get_vm(node.zone, client_vm_name(self.spec)) if self.spec.client_vm else None
            hosts = [] if vm is None else [(0, vm.internal_ip or "", vm.external_ip, None)]
            host_keys = self.cloud.vms.host_keys(vm.zone, vm.name) if vm is not None else []
            endpoints = ",".join(f"{w.internal_ip}:8470" for w in node.workers)
            kind = "queued_resource" if self.spec.tpu.queued else "tpu"
            with self.lock:
                record = self.state.resource(kind)
                if record is not None:
                    record.detail = {**record.detail, "tpu_endpoints": endpoints}
        else:
            hosts = [(w.index, w.internal_ip, w.external_ip, w.home) for w in node.workers]
            host_keys = self.cloud.tpus.host_keys(node.zone, node.name)
        workers = tuple(
            WorkerRecord(
                index=i,
                internal_ip=internal,
                external_ip=external,
                ssh_host=external or internal,
                ssh_port=port,
                home=home,
                role="client_vm" if self.spec.tpu.mode == "node" else "tpu",
            )
            for i, internal, external, home in hosts
        )
        directory = self.ctx.store.cluster_dir(self.spec.name)
        by_index = {w.index: w for w in workers}
        pinned = [
            keys.PinnedKey(by_index[k.worker].ssh_host, port, k.key_type, k.key)
            for k in host_keys
            if k.worker in by_index
        ]
        known_hosts = str(keys.pin_host_keys(directory, pinned)) if pinned else None
        with self.lock:
            self.state.workers = list(workers)
            self.state.zone = node.zone
            self.state.log("up", f"{len(workers)} worker(s) ready in {node.zone}")
            self.ctx.store.save(self.state)
        return workers, known_hosts

    def forget_workers(self) -> None:
        keys.forget_host_keys(self.ctx.store.cluster_dir(self.spec.name))
        with self.lock:
            self.state.workers = []
            self.ctx.store.save(self.state)

    def record(self, kind: str, name: str, zone: str | None, status: str, detail: dict[str, str] | None = None) -> None:
        with self.lock:
            previous = self.state.resource(kind)
            merged = {**(previous.detail if previous else {}), **(detail or {})}
            self.state.set_resource(
                ResourceRecord(kind=kind, name=name, zone=zone, status=status, detail=merged)  # type: ignore[arg-type]
            )
            self.ctx.store.save(self.state)

    def poll(self, fetch: Callable[[], T], done: Callable[[T], bool], what: str, timeout: float | None = None) -> T:
        limit = timeout or self.operation_timeout
        policy = Retrying(
            retry=retry_if_result(lambda value: not done(value)),
            wait=wait_fixed(self.poll_interval),
            stop=stop_after_delay(limit),
            retry_error_callback=lambda _: _raise_timeout(what, limit),
        )
        return policy(fetch)


def _raise_timeout(what: str, limit: float) -> None:
    raise CloudError(f"timed out after {limit:.0f}s waiting for {what}", "rerun `tpuops up` to keep waiting")
