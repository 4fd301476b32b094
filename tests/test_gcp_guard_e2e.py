"""The guard on Google Cloud end to end, on the wire fakes (TPU v2, Compute, the GCS emulator, the metadata
server for the guard's token) with real sshd workers: `tpuops up`, `guard up` (the "VM" a loopback sshd), the
bundle mirrored the way the VM's startup script does (guard_fetch_bundle.py with the metadata token), `tpuops watch
NAME --headless` started as the systemd unit would, HOME and TPUOPS_HOME at the mirrored bundle, after the CLI
that set it up has exited, and `launch`, which hands the run to the guard VM (the bundle staged again and the
VM refreshed). The fake preempts the TPU; the guard deletes it, creates it again and
relaunches the run from its staged spec and code with resume; a laptop `tpuops watch` prints the guard's events
and deletes nothing; the guard then idles instead of exiting."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.metadata import MetadataFake
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli
from tests.sshd import SshdCluster, sshd_available, tpus_answer_at
from tests.test_guard_local import webhook  # noqa: F401  (pytest fixture)
from tpuops.guard.ledger import Ledger
from tpuops.providers.blob_urls import open_blob_store
from tpuops.providers.guard_startup import fetch_program

pytestmark = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")
ZONE = "us-west1-b"
WAIT_S = 60.0
FAST = {"TPUOPS_WATCH_INTERVAL": "2", "TPUOPS_WATCH_BACKOFF": "0.1", "TPUOPS_GUARD_HEARTBEAT": "1"}
TRAIN = """#!/bin/sh
echo "restart=${TPUOPS_RESTART:-0} resume=${TPUOPS_RESUME:-0}" >> ~/attempts-$TPUOPS_CLUSTER
[ "${TPUOPS_RESTART:-0}" -ge 1 ] || exec python3 -c 'import time; time.sleep(300)' "$1"
"""


@pytest.fixture
def sshd_pair(tmp_path: Path) -> Iterator[SshdCluster]:
    """Worker 0 is the TPU's one host; worker 1 stands for the guard VM."""
    with SshdCluster(tmp_path / "sshd", 2) as cluster:
        yield cluster


def wait_until(condition: Callable[[], object], what: str, process: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{what}: the process ended first (exit {process.returncode}): "
                                 f"{process.communicate(timeout=10)[0][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def write_project(root: Path, name: str, port: int, marker: str, hook: str) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.sh").write_text(TRAIN)
    (root / "src" / "train.sh").chmod(0o755)
    (root / "src" / "noise.log").write_text("excluded\n")
    (root / "inputs").mkdir()
    (root / "inputs" / "words.txt").write_text("to every worker\n")
    (root / "inputs" / "table.csv").write_text("a,b\n")
    spec = root / "tpuops.yaml"
    spec.write_text(yaml.safe_dump({
        "name": name, "zone": ZONE, "bucket": {"name": f"{name}-b"},
        "tpu": {"type": "v2-8", "runtime": "tpu-ubuntu2204-base", "preemptible": True},
        "code": {"path": "src", "exclude": ["*.log"]},
        "data": [{"from": "inputs/words.txt", "to": "~/inputs"}, {"from": "inputs/table.csv", "to": f"gs://{name}-b/t"}],
        "ssh": {"user": "root", "port": port},
        "trainer": {"framework": "jax", "command": f"./train.sh {marker}"},
        "guard": {"notify": hook},
    }, sort_keys=False))
    return spec


def test_the_guard_vm_recovers_a_preemption_from_its_bundle_while_the_laptop_only_views(
        fake_gcp: FakeGcp, sshd_pair: SshdCluster, tpuops_home: Path, tmp_path: Path,  # noqa: F811
        tpu_paths_in_worker_homes: None, webhook: tuple[str, list[dict]]) -> None:  # noqa: F811
    gcp, worker, vm = fake_gcp, sshd_pair.workers[0], sshd_pair.workers[1]
    tpus_answer_at(gcp, lambda node, index: worker)
    gcp.compute.external_ip = lambda name, n: vm.host
    gcp.compute.host_keys = lambda name: [vm.published_key()]
    hook, received = webhook
    name, marker = f"ge-{uuid.uuid4().hex[:6]}", f"tpuops-guard-e2e-{uuid.uuid4().hex[:8]}"
    spec = write_project(tmp_path / "project", name, sshd_pair.port, marker, hook)
    cluster_dir = tpuops_home / "clusters" / name  # the key the sshd workers authorise, as `up` would install
    cluster_dir.mkdir(parents=True)
    for suffix in ("", ".pub"):
        (cluster_dir / f"id_ed25519{suffix}").write_bytes(sshd_pair.client_key.with_suffix(suffix).read_bytes())
    (cluster_dir / "id_ed25519").chmod(0o600)
    vm_home = tmp_path / "guard-home"
    prefix = f".tpuops/{name}/guard/bundle/"
    metadata = MetadataFake().start()
    # What the VM's startup script does at boot, and again when `guard up` (or a launch) refreshes it: mirror
    # the bundle with the VM's own token (here over SSH on the sshd standing for the VM), with the program as the
    # startup script carries it (its part inlined).
    fetcher = tmp_path / "fetch_bundle.py"
    fetcher.write_text(fetch_program())
    fetch = " ".join(shlex.quote(part) for part in [
        "env", f"GCE_METADATA_HOST={metadata.host}", f"STORAGE_EMULATOR_HOST={gcp.gcs.url}", "python3",
        str(fetcher), f"{name}-b", prefix, str(vm_home)])
    env = {**gcp.env, **FAST, "TPUOPS_GUARD_VM_HOME": str(vm_home), "TPUOPS_GUARD_VM_USER": "root",
           "TPUOPS_GUARD_VM_REFRESH": fetch}
    processes: list[subprocess.Popen[str]] = []
    try:
        for step in (["up", str(spec)], ["guard", "up", name]):
            done = run_cli(*step, env=env)
            assert done.returncode == 0, f"{step}: {done.stderr[-3000:]}"
        booted = subprocess.run(["sh", "-c", fetch], capture_output=True, text=True, timeout=60)
        assert booted.returncode == 0, booted.stderr
        # The unit's command, HOME and TPUOPS_HOME at the mirrored bundle, after the CLI that set it up exited.
        guard = start(["watch", name, "--headless"], {**env, "HOME": str(vm_home), "TPUOPS_HOME": str(vm_home),
                                                       "TPUOPS_GUARD_HOLDER": "guard@vm"})
        processes.append(guard)
        time.sleep(1.0)  # it waits for the first run, which it learns of from its own copy of the state
        launched = run_cli("launch", name, env=env)  # hands the run to the guard VM (staged, then refreshed)
        assert launched.returncode == 0 and "warning" not in launched.stderr, launched.stderr[-3000:]
        wait_until(lambda: (worker.home / f"attempts-{name}").exists(), "the first start")
        assert metadata.token_requests()
        assert_bundle_as_the_vm_sees_it(gcp, vm_home, name, prefix, hook, cluster_dir)
        (worker.home / "inputs").unlink()  # a re-created TPU's disk is empty: the guard must push it again
        shutil.rmtree(worker.home / ".tpuops-trees" / "inputs")

        ledger = Ledger(open_blob_store(f"gs://{name}-b/.tpuops/{name}/guard", env=gcp.env))
        wait_until(lambda: any(e.kind == "watch" for _, e in ledger.events()), "the guard to watch", guard)
        laptop = start(["watch", name], env)
        processes.append(laptop)
        time.sleep(2.0)  # the laptop has found the guard's lease
        gcp.tpu.preempt(ZONE, name)
        laptop_out, _ = laptop.communicate(timeout=WAIT_S)
        wait_until(lambda: any(m["kind"] == "ended" for m in received), "the guard's webhook POST", guard)
        time.sleep(1.0)
        assert guard.poll() is None  # idles for the next run instead of exiting into Restart=always
        deletes = len(gcp.tpu_v2.server.calls("DELETE", rf"/nodes/{name}$"))  # before `down` below
        # The guard's state comes back to the laptop: its relaunch is the laptop's current run now.
        status = run_cli("status", name, "--json", env=env)
        assert status.returncode == 0, status.stderr[-3000:]
        run = json.loads(status.stdout)["run"]
        assert run["restart"] == 1, run  # the laptop's own launch was restart 0
        laptop_tpu = json.loads((cluster_dir / "state.json").read_text())
        vm_tpu = json.loads((vm_home / "clusters" / name / "state.json").read_text())
        assert [r for r in laptop_tpu["resources"] if r["kind"] == "tpu"] == \
            [r for r in vm_tpu["resources"] if r["kind"] == "tpu"]  # the TPU the guard created again
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
            with_timeout(process)
        run_cli("stop", name, env=env, timeout=60)
        subprocess.run(["pkill", "-f", marker], timeout=10, check=False)  # only this test's unique marker
        run_cli("down", name, "--yes", env=env, timeout=120)
        metadata.stop()
    guard_out = processes[0].stdout.read() if processes[0].stdout else ""  # type: ignore[union-attr]

    # The guard deleted the preempted TPU once, created it again, pushed the staged code and data, and resumed.
    assert deletes == 1 and len(gcp.tpu_v2.server.calls("POST", r"/nodes$")) == 2
    assert (worker.home / f"attempts-{name}").read_text().splitlines() == ["restart=0 resume=0",
                                                                            "restart=1 resume=1"]
    assert (worker.home / "inputs" / "words.txt").read_text() == "to every worker\n"
    events = [(event.holder, event.kind, event.message) for _, event in ledger.events()]
    holders = {holder for holder, kind, _ in events if kind in ("recovery", "restart", "ended")}
    assert holders == {"guard@vm"}, events
    assert laptop.returncode == 0, laptop_out
    assert "guard@vm" in laptop_out and "TPU PREEMPTED" in laptop_out and "deleting" in laptop_out
    assert hook not in laptop_out + guard_out  # the webhook is a secret


def assert_bundle_as_the_vm_sees_it(gcp: FakeGcp, vm_home: Path, name: str, prefix: str, hook: str,
                                    cluster_dir: Path) -> None:
    staged = {blob.name[len(prefix):]: blob.download_as_bytes()
              for blob in gcp.storage().bucket(f"{name}-b").list_blobs(prefix=prefix)}
    private = b"".join(cluster_dir.joinpath("id_ed25519").read_bytes().splitlines()[1:3])
    assert not any(private in data or b"PRIVATE KEY" in data or hook.encode() in data for data in staged.values())
    here = vm_home / "clusters" / name
    state = json.loads((here / "state.json").read_text())
    assert state["spec_path"] == str(here / "spec" / "tpuops.yaml") and state["runs"]
    copy = yaml.safe_load((here / "spec" / "tpuops.yaml").read_text())
    assert copy["code"]["path"] == "code" and "notify" not in copy["guard"]
    assert copy["data"] == [{"from": "data/0/words.txt", "to": "~/inputs"}]  # gs:// data stays in the bucket
    assert os.access(here / "spec" / "code" / "train.sh", os.X_OK)
    assert not (here / "spec" / "code" / "noise.log").exists()
    assert (here / "id_ed25519.pub").exists() and (here / "known_hosts").exists()
    for secret_file in ("id_ed25519", "notify"):  # over SSH, 0600
        assert stat.S_IMODE((here / secret_file).stat().st_mode) == 0o600
    assert (here / "notify").read_text() == hook


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tpuops", *args], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def with_timeout(process: subprocess.Popen[str]) -> None:
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
