"""A workflow hands on the spec and the state it already holds instead of reading them again by name: `up`
parses the spec once and reads the state once (the cost guard's agent installed from what `up` just wrote),
`launch` installs the agent over the connection it already has, `run` hands what `up` holds to the launch, and
`down` reads both once after its confirmation. Counted at the two places every read goes through (the spec file's
text, the state store)."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tpuops.spec.loading as spec_module  # where load_spec reads the file
from tests.helpers import write_spec
from tpuops.context import Context
from tpuops.ops.down import execute, find
from tpuops.ops.launch import LaunchOptions, launch_run
from tpuops.ops.run import run_spec
from tpuops.ops.run_control import stop
from tpuops.ops.up import up
from tpuops.ops.watch import Watcher, WatchOptions
from tpuops.state import StateStore


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    counts: collections.Counter[str] = collections.Counter()
    read_text, load = spec_module.read_spec_text, StateStore.load

    def counted_text(path: Path) -> str:
        counts["spec"] += 1
        return read_text(path)

    def counted_load(store: StateStore, name: str):  # type: ignore[no-untyped-def]
        counts["state"] += 1
        return load(store, name)

    monkeypatch.setattr(spec_module, "read_spec_text", counted_text)
    monkeypatch.setattr(StateStore, "load", counted_load)
    yield counts


def test_up_launch_and_down_read_the_spec_and_state_they_hold_once(tmp_path: Path, tpuops_home: Path,
                                                                  reads: collections.Counter[str]) -> None:
    spec = write_spec(tmp_path, """
        name: held
        provider: local
        tpu: {type: v2-8, workers: 1}
        bucket: {name: held-b}
        autostop: {idle: 30m}
        trainer: {framework: jax, command: "sleep 30"}
        """)
    ctx = Context.from_env()
    result = up(ctx, spec)
    assert result.autostop is not None and result.autostop.started, result.autostop  # the agent went on
    assert dict(reads) == {"spec": 1, "state": 1}

    reads.clear()
    report = launch_run(ctx, "held", LaunchOptions())
    try:
        assert report.ok and report.autostop is not None and report.autostop.started
        assert reads["spec"] == 1  # the launch's own read; the agent's refresh reads nothing again
    finally:
        stop(ctx, "held")
        reads.clear()
        plan, cloud = find(ctx, "held", delete_bucket=True, force=True)
        execute(ctx, plan, cloud)
    assert dict(reads) == {"spec": 2, "state": 2}  # find's, then execute's after the confirmation
    assert StateStore(tpuops_home).load("held") is None


def test_run_hands_what_up_holds_to_the_launch(tmp_path: Path, tpuops_home: Path,
                                               reads: collections.Counter[str]) -> None:
    spec = write_spec(tmp_path, """
        name: held-run
        provider: local
        tpu: {type: v2-8, workers: 1}
        bucket: {name: held-run-b}
        autostop: {idle: 30m}
        logs: {tensorboard: gs://held-run-b/tb}
        trainer: {framework: jax, command: "sleep 30"}
        """)
    ctx = Context.from_env()
    try:
        summary = run_spec(ctx, spec, detach=True)
        assert summary.run_id is not None and summary.exit_code == 0
        # The spec: run's check of the local inputs (before `up`: a missing code directory costs no TPU) and up's
        # parse. The state: up's read, then the launch's record of the run (a read-modify-write, since another
        # command may have written meanwhile) and its update. The launch, its logdir and the guard's hand-over
        # use what up holds: nothing is loaded again by name.
        assert dict(reads) == {"spec": 2, "state": 3}
    finally:
        stop(ctx, "held-run")
        plan, cloud = find(ctx, "held-run", delete_bucket=True, force=True)
        execute(ctx, plan, cloud)


def test_a_recovery_reads_the_spec_once_and_hands_it_on(tmp_path: Path, tpuops_home: Path,
                                                       reads: collections.Counter[str]) -> None:
    """watch's re-creation of the TPU: the spec is read once, and the pool choice, `up` and the move to another
    pool (its checkpoints' copy) use that copy. Moved on purpose: re-creating has failed for longer than
    tpu.move_after, so the other pool is tried first."""
    spec = write_spec(tmp_path, """
        name: held-watch
        provider: local
        tpu:
          pools:
            - {type: v2-8, zone: sim-west1-a, provisioning: spot}
            - {type: v2-8, zone: sim-east1-b, provisioning: spot}
          workers: 1
          move_after: 0s
        trainer: {framework: jax, command: "sleep 30"}
        """)
    grant = [{"generation": "v2", "kind": "spot", "zone": zone, "limit": 8} for zone in ("sim-west1-a", "sim-east1-b")]
    (tpuops_home / "local").mkdir(parents=True, exist_ok=True)
    (tpuops_home / "local" / "quota.json").write_text(json.dumps({"limits": grant}))
    ctx = Context.from_env()
    up(ctx, spec)
    assert StateStore(tpuops_home).require("held-watch").zone == "sim-west1-a"
    watcher = Watcher(ctx, "held-watch", WatchOptions(), pool_failing_since=time.time() - 60)
    try:
        reads.clear()
        watcher.replace_tpu()
        assert reads["spec"] == 1
        assert StateStore(tpuops_home).require("held-watch").zone == "sim-east1-b"  # it did move
    finally:
        plan, cloud = find(ctx, "held-watch", force=True)
        execute(ctx, plan, cloud)


def test_run_output_is_read_from_the_state_its_caller_holds(tmp_path: Path, tpuops_home: Path,
                                                            reads: collections.Counter[str]) -> None:
    """`logs --workers --run ID`: worker_output reads the state and hands it to the reader of the kept output,
    which reads it no more."""
    from tpuops.ops.logs import worker_output
    from tpuops.ops.run_control import record_run
    from tpuops.state import RunRecord

    spec = write_spec(tmp_path, """
        name: held-out
        provider: local
        tpu: {type: v2-8, workers: 1}
        bucket: {name: held-out-b}
        """)
    ctx = Context.from_env()
    up(ctx, spec)
    run_id = "20261127-100000-aaaa"
    record_run(ctx, "held-out", RunRecord(id=run_id, command="train", workers=["w0"]))
    chunk = tpuops_home / "local" / "buckets" / "held-out-b" / ".tpuops" / "held-out" / "runs" / run_id / "output"
    (chunk / "w0").mkdir(parents=True)
    (chunk / "w0" / "r000-000000").write_text("step 1\nstep 2\n")
    lines: list[str] = []
    try:
        reads.clear()
        code = worker_output(ctx, "held-out", follow=False, run_id=run_id, on_error=lines.append,
                             on_line=lambda worker, _stream, line: lines.append(f"{worker}: {line}"))
        assert code == 0 and lines == ["w0: step 1", "w0: step 2"]
        assert reads["state"] == 1
    finally:
        plan, cloud = find(ctx, "held-out", delete_bucket=True, force=True)
        execute(ctx, plan, cloud)


def test_the_launch_hands_its_recorded_runs_to_the_output_shipper(tmp_path: Path, tpuops_home: Path,
                                                                  reads: collections.Counter[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With a bucket the launch starts the shipper of the run's output (ops/run_output.py); which run it
    continues comes from the runs the launch just recorded, not from another read. The state: the launch's way
    in, its record of the run and the update of its workers' states."""
    monkeypatch.setenv("TPUOPS_KEEP_OUTPUT", "1")  # the suite turns the shipper off
    spec = write_spec(tmp_path, """
        name: held-ship
        provider: local
        tpu: {type: v2-8, workers: 1}
        bucket: {name: held-ship-b}
        trainer: {framework: jax, command: "sleep 30"}
        """)
    ctx = Context.from_env()
    up(ctx, spec)
    try:
        reads.clear()
        report = launch_run(ctx, "held-ship", LaunchOptions())
        assert report.ok
        assert reads["state"] == 3
    finally:
        stop(ctx, "held-ship")
        plan, cloud = find(ctx, "held-ship", delete_bucket=True, force=True)
        execute(ctx, plan, cloud)
