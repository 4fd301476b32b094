"""The guard VM's state handed back to the laptop (access/guard_state.py): the merge rules on plain states, then the
round trip through a bucket (the local provider's directory store): the guard publishes only what changed, and
the laptop's commands read a re-created TPU's workers, host keys and the guard's relaunch from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpuops import keys
from tpuops.access.guard_place import guard_store
from tpuops.access.guard_state import STATE_BLOB, StatePublisher, merge_states, with_guard_state
from tpuops.context import Context
from tpuops.state import (
    BucketRecord,
    ClusterState,
    EventRecord,
    RunRecord,
    StateStore,
    TpuRecord,
    VmRecord,
    WorkerRecord,
)


def worker(host: str) -> WorkerRecord:
    return WorkerRecord(index=0, internal_ip=host, ssh_host=host, ssh_port=2222)


def laptop_state(spec_path: str = "/home/ada/bert/tpuops.yaml") -> ClusterState:
    return ClusterState(
        name="bert", provider="local", zone="us-central2-b", spec_path=spec_path,
        resources=[BucketRecord(name="bert-b", status="created"),
                   TpuRecord(name="bert", zone="us-central2-b", status="created",
                             created_at="2026-11-25T01:00:00+00:00"),
                   VmRecord(kind="guard_vm", name="bert-guard", zone="us-central2-b", status="created")],
        workers=[worker("10.0.0.2")],
        runs=[RunRecord(id="r1", command="python train.py", started_at="2026-11-25T01:05:00+00:00",
                        workers=["w0"], worker_states={"w0": "running"})],
        events=[EventRecord(at="2026-11-25T01:00:00+00:00", kind="up", message="1 worker(s) ready")])


def recovered(laptop: ClusterState) -> ClusterState:
    """The guard's copy after it re-created the TPU in another zone and relaunched the run."""
    guard = laptop.model_copy(deep=True)
    guard.spec_path = "/var/lib/tpuops-guard/clusters/bert/spec/tpuops.yaml"
    guard.drop_resource("guard_vm")
    guard.set_resource(TpuRecord(name="bert", zone="us-central2-a", status="created",
                                 created_at="2026-11-25T03:10:00+00:00"))
    guard.zone = "us-central2-a"
    guard.workers = [worker("10.0.9.7")]
    guard.runs[0].worker_states = {"w0": "lost"}
    guard.runs.append(RunRecord(id="r1-restart1", command="python train.py", started_at="2026-11-25T03:12:00+00:00",
                                workers=["w0"], worker_states={"w0": "running"}, restart=1))
    guard.log("watch", "TPU PREEMPTED: re-created in us-central2-a")
    return guard


def test_the_guards_newer_tpu_and_its_relaunch_are_taken_and_what_only_the_laptop_knows_stays() -> None:
    laptop = laptop_state()
    merged = merge_states(laptop, recovered(laptop))
    assert [w.ssh_host for w in merged.workers] == ["10.0.9.7"] and merged.zone == "us-central2-a"
    tpu = merged.tpu_record()
    assert tpu is not None and tpu.zone == "us-central2-a"
    assert merged.spec_path == laptop.spec_path  # the laptop's spec, not the VM's copy
    assert merged.resource("guard_vm") is not None and merged.resource("bucket") is not None
    assert [run.id for run in merged.runs] == ["r1", "r1-restart1"]
    assert merged.current_run is not None and merged.current_run.restart == 1
    assert merged.runs[0].worker_states == {"w0": "lost"}
    assert [event.kind for event in merged.events] == ["up", "watch"]
    assert merge_states(merged, recovered(laptop)) == merged  # idempotent: merged at every command


def test_a_move_to_another_region_keeps_both_buckets_for_down() -> None:
    laptop = laptop_state()
    guard = recovered(laptop)
    guard.pool = "v4-8 spot in us-east5-a"
    guard.set_resource(BucketRecord(name="bert-us-east5", status="created"))
    merged = merge_states(laptop, guard)
    assert merged.resource("bucket").name == "bert-us-east5"  # type: ignore[union-attr]
    assert merged.recorded_buckets() == ["bert-b", "bert-us-east5"]
    assert merge_states(merged, guard) == merged


def test_the_laptops_newer_run_and_ended_states_are_kept() -> None:
    laptop = laptop_state()
    guard = recovered(laptop)
    laptop.runs[0].worker_states = {"w0": "killed"}  # `tpuops stop` from the laptop, after the guard's copy
    laptop.runs.append(RunRecord(id="r2", command="python train.py --lr 3e-4",
                                 started_at="2026-11-25T04:00:00+00:00", workers=["w0"]))
    merged = merge_states(laptop, guard)
    assert merged.runs[0].worker_states == {"w0": "killed"}
    assert [run.id for run in merged.runs] == ["r1", "r1-restart1", "r2"] and merged.current_run.id == "r2"


def test_an_older_or_missing_tpu_of_the_guard_leaves_the_laptops_workers() -> None:
    laptop = laptop_state()
    guard = laptop.model_copy(deep=True)
    guard.set_resource(TpuRecord(name="bert", zone="us-central2-b", status="creating"))  # mid-recovery
    guard.workers = []
    merged = merge_states(laptop, guard)
    assert merged.workers == laptop.workers and merged.tpu_record() == laptop.tpu_record()
    assert merged == laptop


@pytest.fixture
def ctx(tpuops_home: Path) -> Context:
    return Context.from_env()


def test_published_by_the_guard_and_read_back_by_the_laptop(ctx: Context, tmp_path: Path) -> None:
    laptop = laptop_state(str(tmp_path / "tpuops.yaml"))
    ctx.store.save(laptop)
    cluster_dir = ctx.store.cluster_dir("bert")
    keys.pin_host_keys(cluster_dir, [keys.PinnedKey("10.0.0.2", 2222, "ssh-ed25519", "OLDKEY"),
                                     keys.PinnedKey("34.1.2.3", 22, "ssh-ed25519", "GUARDVMKEY")])
    store = guard_store(ctx, laptop, None)
    assert store is not None

    guard_home = Context.from_env(env={"TPUOPS_HOME": str(tmp_path / "vm-home")})  # the VM's own TPUOPS_HOME
    guard_home.store.save(recovered(laptop))
    keys.pin_host_keys(guard_home.store.cluster_dir("bert"),
                       [keys.PinnedKey("10.0.9.7", 2222, "ssh-ed25519", "NEWKEY")])
    publisher = StatePublisher(guard_home, "bert", store)
    assert publisher.publish() is True
    assert publisher.publish() is False  # nothing changed: nothing written
    generation = store.read_versioned(STATE_BLOB).generation
    guard_home.store.save(guard_home.store.require("bert"))  # saved again, only its time changed
    assert publisher.publish() is False and store.read_versioned(STATE_BLOB).generation == generation

    merged = with_guard_state(ctx, ctx.store.require("bert"))
    assert [w.ssh_host for w in merged.workers] == ["10.0.9.7"]
    saved = StateStore(ctx.store.home).require("bert")
    assert saved.current_run is not None and saved.current_run.id == "r1-restart1"  # kept for the next command
    hosts = (cluster_dir / keys.KNOWN_HOSTS).read_text()
    assert "[10.0.9.7]:2222 ssh-ed25519 NEWKEY" in hosts and "GUARDVMKEY" in hosts  # the guard VM's own key stays

    # Without a guard VM the bucket is not read at all.
    saved.drop_resource("guard_vm")
    saved.workers = [worker("10.0.0.2")]
    assert with_guard_state(ctx, saved) is saved
