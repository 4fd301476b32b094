"""Worker output that outlives the worker: a run's output is kept in the bucket as it goes (each worker ships
numbered chunks), so `logs --workers --run ID` shows it after a preemption or `down`, and a recovered run's output
continues under its first run; no shipper is left running."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.gcs_emulator import GcsEmulator, gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec
from tests.test_quickstart import processes_under
from tpuops.context import Context
from tpuops.ops.launch import LaunchOptions, follow_and_wait, launch_run

SPEC = """
name: keep
provider: local
tpu: {type: v2-8, workers: 2}
bucket: {name: keep-bucket}
code: {path: ./src}
trainer:
  framework: jax
  command: "echo started on $TPUOPS_WORKER_ID; echo step 1 on $TPUOPS_WORKER_ID; sleep 120"
"""


@pytest.fixture
def fast_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUOPS_OUTPUT_INTERVAL", "0.3")
    monkeypatch.setenv("TPUOPS_KEEP_OUTPUT", "1")  # the suite turns it off; here the bucket is a local directory


def kept_chunks(home: Path) -> dict[str, list[str]]:
    root = home / "local" / "buckets" / "keep-bucket" / ".tpuops" / "keep" / "runs"
    found: dict[str, list[str]] = {}
    for chunk in sorted(root.glob("*/output/*/r*")):
        found.setdefault(chunk.parent.name, []).append(chunk.name)
    return found


def wait_for(condition, timeout: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_output_survives_preemption_and_a_recovery_continues_it(
    tpuops_home: Path, tmp_path: Path, fast_chunks: None
) -> None:
    spec = write_spec(tmp_path, SPEC)
    (tmp_path / "src").mkdir()
    assert run_cli("up", str(spec)).returncode == 0
    try:
        launched = run_cli("launch", "keep", "--json")
        assert launched.returncode == 0, launched.stderr
        run_id = Context.from_env().store.require("keep").current_run.id
        wait_for(lambda: sorted(kept_chunks(tpuops_home)) == ["w0", "w1"])  # both workers' lines went out

        assert run_cli("simulate", "preempt", "keep").returncode == 0
        shown = run_cli("logs", "keep", "--workers", "--run", run_id[:15])
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines() == ["[w0] started on 0", "[w0] step 1 on 0",
                                             "[w1] started on 1", "[w1] step 1 on 1"]

        # The recovery (as `watch` relaunches it: restart 1) continues the same run's output.
        ctx = Context.from_env()
        again = launch_run(ctx, "keep", LaunchOptions(command="echo resumed on $TPUOPS_WORKER_ID", restart=1,
                                                      replace=True))
        assert again.ok, again.as_dict()
        assert follow_and_wait(ctx, "keep", again.run_id) == 0
        wait_for(lambda: all(len(chunks) == 2 for chunks in kept_chunks(tpuops_home).values()))
        # Down keeps the bucket (and the runs in the state): the TPU and its workers are gone.
        assert run_cli("down", "keep", "--yes").returncode == 0
        assert processes_under(tpuops_home / "local" / "workers") == []  # no shipper left behind
        whole = run_cli("logs", "keep", "--workers", "--run", run_id)
        assert whole.returncode == 0, whole.stderr
        assert whole.stdout.splitlines() == [
            "[w0] started on 0", "[w0] step 1 on 0", f"[w0] -- run {again.run_id} (restart 1) --", "[w0] resumed on 0",
            "[w1] started on 1", "[w1] step 1 on 1", f"[w1] -- run {again.run_id} (restart 1) --", "[w1] resumed on 1",
        ]
        current = run_cli("logs", "keep", "--workers")  # no workers any more: the current run, as kept
        assert current.returncode == 0 and current.stdout == whole.stdout
        only = run_cli("logs", "keep", "--workers", "--run", again.run_id)
        assert only.stdout.splitlines() == [f"[w0] -- run {again.run_id} (restart 1) --", "[w0] resumed on 0",
                                            f"[w1] -- run {again.run_id} (restart 1) --", "[w1] resumed on 1"]
        follow = run_cli("logs", "keep", "--workers", "--run", run_id, "-f")
        assert follow.returncode == 2 and "drop -f, or --run" in follow.stderr
    finally:
        run_cli("down", "keep", "--yes", "--delete-bucket", "--force")


def test_the_shipper_writes_google_cloud_storage_and_logs_reads_it(
    tpuops_home: Path, tmp_path: Path, gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    """The worker's side against a real Cloud Storage API (the emulator) with the service account's token from the
    metadata server, as on a TPU VM; the reader through the google-cloud-storage client."""
    import json
    import os
    import subprocess
    import sys

    from tests.fakes.metadata import MetadataFake
    from tpuops.ops.run_output import kept_output, output_url
    from tpuops.shipped import program

    bucket = gcs_emulator.new_bucket()
    run_dir = tmp_path / "runs" / "20260301-080000-aaaa"
    run_dir.mkdir(parents=True)
    (run_dir / "pid").write_text(f"{os.getpid()}\n")  # alive while the test runs
    output = run_dir / "output.log"
    output.write_text("first line\nsecond")  # the second line is still being written
    prefix = output_url(bucket, "gc", "20260301-080000-aaaa").split("/", 3)[3] + "/w0"
    with MetadataFake() as metadata:
        config = {"run_dir": str(run_dir), "restart": 0, "interval": 0.2, "bucket": bucket, "prefix": prefix,
                  "storage": gcs_emulator.host, "metadata_host": metadata.host}
        # As shipped (its part inlined), and with no tpuops to import (-I -S: no PYTHONPATH, no site-packages).
        shipper = subprocess.Popen([sys.executable, "-I", "-S", "-c", program("output_shipper"), json.dumps(config)],
                                   stderr=subprocess.PIPE, text=True)
        try:
            client = gcs_emulator.client()
            wait_for(lambda: [b.name for b in client.list_blobs(bucket)] == [f"{prefix}/r000-000000"])
            assert client.bucket(bucket).blob(f"{prefix}/r000-000000").download_as_bytes() == b"first line\n"
            with output.open("a") as handle:
                handle.write(" half\nlast words, no newline")
            (run_dir / "exit_code").write_text("0\n")  # the run ended: everything goes, then the shipper ends
            assert shipper.wait(timeout=30) == 0, shipper.stderr.read() if shipper.stderr else ""
        finally:
            if shipper.poll() is None:
                shipper.kill()
                shipper.wait(timeout=10)
        assert metadata.tokens_issued  # it wrote as the VM's service account
    assert json.loads((run_dir / "output.shipped").read_text()) == {"seq": 2, "offset": len(output.read_bytes())}

    state = {"name": "gc", "provider": "gcp", "project": "tpuops-test", "zone": "europe-west4-a",
             "spec_path": str(tmp_path / "missing.yaml"),
             "resources": [{"kind": "bucket", "name": bucket, "status": "created"}],
             "runs": [{"id": "20260301-080000-aaaa", "command": "python3 train.py"}]}
    (tpuops_home / "clusters" / "gc").mkdir(parents=True)
    (tpuops_home / "clusters" / "gc" / "state.json").write_text(json.dumps(state))
    for name, value in gcs_emulator.env.items():
        monkeypatch.setenv(name, value)
    lines: list[tuple[str, str]] = []
    ctx = Context.from_env()
    assert kept_output(ctx, ctx.store.require("gc"), None, lambda w, s, line: lines.append((w, line))) == 3
    assert lines == [("w0", "first line"), ("w0", "second half"), ("w0", "last words, no newline")]
