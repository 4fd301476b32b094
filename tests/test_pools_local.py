"""Recovery across pools on the local simulator, as a user rehearses it: a run in the first pool is preempted
while that zone stays out of capacity (`tpuops simulate stockout`); the guard moves it to the next pool, in
another region, copies its checkpoint to that region's bucket, and the trainer resumes from its step."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_cli
from tests.test_guard_local import FAST, cli, guard_pid, ledger_of, wait_until
from tests.test_quickstart import QUICKSTART, processes_under
from tpuops.providers.local_guard_host import is_guard_process

FIRST, NEXT = "sim-west1-a", "sim-east1-b"


def pools_spec(directory: Path) -> Path:
    root = QUICKSTART.parent
    spec = directory / "pools.yaml"
    spec.write_text(f"""
name: pools
provider: local
tpu:
  pools:
    - {{type: v2-8, zone: {FIRST}, provisioning: spot}}
    - {{type: v2-8, zone: {NEXT}, provisioning: spot}}
  workers: 2
  move_after: 0s
bucket: {{name: "pools-{{region}}"}}
code: {{path: {root.parent / "templates" / "charlm"}}}
data: [{{from: {root / "data"}, to: data}}]
trainer:
  framework: jax
  command: python3 train.py --data ~/data/quickstart.txt --steps 40000 --checkpoint-every 100
  checkpoints: gs://pools-{{region}}/checkpoints
logs: {{tensorboard: "gs://pools-sim-west1/logs"}}
""")
    return spec


def test_a_zone_out_of_capacity_moves_the_run_to_the_next_pool(tmp_path: Path, tpuops_home: Path,
                                                               monkeypatch) -> None:  # noqa: ANN001
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)
    grant = [{"generation": "v2", "kind": "spot", "zone": zone, "limit": 8} for zone in (FIRST, NEXT)]
    (tpuops_home / "local").mkdir(parents=True, exist_ok=True)
    (tpuops_home / "local" / "quota.json").write_text(json.dumps({"limits": grant}))
    buckets = tpuops_home / "local" / "buckets"
    started = cli("run", str(pools_spec(tmp_path)), "--detach", timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        checkpoint = buckets / "pools-sim-west1" / "checkpoints"
        wait_until(lambda: checkpoint.is_dir() and any(checkpoint.iterdir()), "the first checkpoint")
        assert cli("guard", "up", "pools").returncode == 0
        ledger = ledger_of(tpuops_home, "pools-sim-west1", "pools")  # the first pool's bucket keeps the ledger
        wait_until(lambda: (beat := ledger.heartbeat()) is not None and beat.step, "the guard to see steps")

        assert cli("simulate", "stockout", FIRST, "--for", "10m").returncode == 0
        assert cli("simulate", "preempt", "pools").returncode == 0
        recovered = wait_until(lambda: [e for _, e in ledger.events() if e.kind == "recovered"], "the recovery")
        events = [event for _, event in ledger.events()]
        moved = next(event for event in events if event.kind == "moved")
        assert (moved.data["from_pool"], moved.data["to_pool"]) == (f"v2-8 spot in {FIRST}", f"v2-8 spot in {NEXT}")
        assert moved.data["checkpoint_bytes"] > 0 and "has failed for" in moved.data["why"]
        assert any(e.kind == "recovery" and e.message.startswith("attempt failed") and "no capacity" in e.message
                   for e in events)  # the same pool first
        copied = buckets / "pools-sim-east1" / "checkpoints"
        assert sorted(p.name for p in copied.iterdir()) == sorted(p.name for p in checkpoint.iterdir())
        facts = recovered[0].data  # charlm resumed from the copied checkpoint (a multiple of 100), not step 1
        assert facts["first_step_after"] > 1 and (facts["first_step_after"] - 1) % 100 == 0

        state = json.loads((tpuops_home / "clusters" / "pools" / "state.json").read_text())
        assert (state["zone"], state["pool"]) == (NEXT, f"v2-8 spot in {NEXT}")
        pools = [(e["kind"], e["pool"]) for e in state["events"] if e["kind"] in ("placed", "preempted", "moved")]
        assert pools == [("placed", f"v2-8 spot in {FIRST}"), ("preempted", f"v2-8 spot in {FIRST}"),
                         ("placed", f"v2-8 spot in {NEXT}"), ("moved", f"v2-8 spot in {NEXT}")], pools
        assert all(e["seconds"] >= 0 for e in state["events"] if e["kind"] == "placed")
        status = cli("status", "pools")
        assert f"pool: v2-8 spot in {NEXT}" in status.stdout, status.stdout
        assert f"from pool v2-8 spot in {FIRST} to pool v2-8 spot in {NEXT}" in status.stdout
    finally:
        pid = guard_pid(tpuops_home, "pools")
        run_cli("guard", "down", "pools", timeout=120)
        run_cli("down", "pools", "--yes", timeout=120)
        if pid is not None and is_guard_process(pid, "pools"):
            from tpuops.providers.local_guard_host import stop_process_group

            stop_process_group(pid)
        assert processes_under(tpuops_home / "local" / "workers") == []


def two_pool_spec(tmp_path: Path, tpuops_home: Path, name: str, tpu_extra: str = "", rest: str = "") -> Path:
    """A spot grant of one v2-8 in each of two zones, and a spec NAME with those two pools, a bucket per region."""
    grant = [{"generation": "v2", "kind": "spot", "zone": zone, "limit": 8} for zone in (FIRST, NEXT)]
    (tpuops_home / "local").mkdir(parents=True, exist_ok=True)
    (tpuops_home / "local" / "quota.json").write_text(json.dumps({"limits": grant}))
    spec = tmp_path / f"{name}.yaml"
    pools = f"[{{type: v2-8, zone: {FIRST}, provisioning: spot}}, {{type: v2-8, zone: {NEXT}, provisioning: spot}}]"
    spec.write_text(f"name: {name}\nprovider: local\ntpu:\n  pools: {pools}\n{tpu_extra}"
                    f'bucket: {{name: "{name}-{{region}}"}}\n{rest}')
    return spec


def test_a_guard_whose_status_calls_fail_never_moves(tmp_path: Path, tpuops_home: Path) -> None:
    from tests.test_guard_local import kinds
    from tpuops.context import Context
    from tpuops.ops.guard_loop import GuardedWatcher
    from tpuops.ops.watch import WatchOptions

    spec = two_pool_spec(tmp_path, tpuops_home, "blind", tpu_extra="  move_after: 0s\n",
                         rest='trainer: {framework: jax, command: "sleep 300"}\n')
    assert cli("up", str(spec)).returncode == 0
    assert cli("launch", "blind").returncode == 0
    assert cli("simulate", "stockout", FIRST, "--for", "10m").returncode == 0  # a move would have somewhere to go
    record = tpuops_home / "local" / "tpus" / "blind.json"
    ready = record.read_text()
    ledger = ledger_of(tpuops_home, "blind-sim-west1", "blind")
    watcher = GuardedWatcher(Context.from_env(), "blind", WatchOptions(poll_interval=0.01, backoff=0.01),
                             ledger=ledger)
    try:
        for _ in range(3):  # the status call fails, poll after poll (the API answers garbage)
            record.write_text("{not json")
            assert watcher.step() is None
        record.write_text(ready)
        assert watcher.step() is None
        seen = kinds(ledger)
        state = json.loads((tpuops_home / "clusters" / "blind" / "state.json").read_text())
    finally:
        record.write_text(ready)
        cli("simulate", "stockout", FIRST, "--for", "0")
        cli("down", "blind", "--yes")
    assert not {"preemption", "preempted", "recovery", "moved", "restart"} & set(seen), seen
    assert (state["zone"], state["pool"]) == (FIRST, f"v2-8 spot in {FIRST}")


def test_down_deletes_the_bucket_of_every_region_the_run_was_in_and_no_other(tmp_path: Path,
                                                                             tpuops_home: Path) -> None:
    """`up` in the first pool, preempted while that zone is out of capacity, `up` again moves to the next pool:
    a bucket in each region. `down --delete-bucket` deletes both, says each, and leaves a third of the same
    pattern and label alone, since tpuops never recorded making it."""
    from tpuops.context import Context

    spec = two_pool_spec(tmp_path, tpuops_home, "moved")
    storage = Context.from_env().local_cloud().storage
    try:
        assert cli("up", str(spec)).returncode == 0
        assert cli("simulate", "stockout", FIRST, "--for", "10m").returncode == 0
        assert cli("simulate", "preempt", "moved").returncode == 0
        moved = cli("up", str(spec))
        assert moved.returncode == 0 and "bucket moved-sim-east1" in moved.stdout, moved.stdout
        storage.create_bucket("moved-sim-central1", "SIM-CENTRAL1", {"tpuops-cluster": "moved"})
        down = cli("down", "moved", "--yes", "--delete-bucket", "--force")
        assert down.returncode == 0, down.stderr
        assert [line.strip() for line in down.stdout.splitlines() if "checked gone" in line] == [
            "bucket gs://moved-sim-west1 deleted, checked gone", "bucket gs://moved-sim-east1 deleted, checked gone"]
        assert storage.get_bucket("moved-sim-west1") is None and storage.get_bucket("moved-sim-east1") is None
        assert storage.get_bucket("moved-sim-central1") is not None
    finally:
        cli("simulate", "stockout", FIRST, "--for", "0")
        cli("down", "moved", "--yes")


def test_plan_live_says_a_reservation_pool_is_covered_as_up_would_use_it(tmp_path: Path, tpuops_home: Path) -> None:
    """A reservation holds its own capacity: `up` does not ask the project's quota for it, and `plan --live` says
    the same instead of "NOT covered" (it read the quota for it before)."""
    spec = two_pool_spec(tmp_path, tpuops_home, "reserved", tpu_extra="  queued: true\n")
    text = spec.read_text().replace(f"zone: {NEXT}, provisioning: spot}}",
                                    f"zone: {NEXT}, provisioning: on-demand, reservation: block-a}}")
    spec.write_text(text)
    shown = cli("plan", str(spec), "--live", "--json")
    assert shown.returncode == 0, shown.stderr
    pools = json.loads(shown.stdout)["pools"]
    assert [pool["quota"].split(":")[0] for pool in pools] == ["covered", "covered"]
    assert "reservation block-a" in pools[1]["quota"]
