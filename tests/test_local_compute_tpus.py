"""The local simulator answers ComputeTpuApi as the Compute Engine adapter does: hosts in rank order apart from
their names, a preemption and a broken slice seen as such, deletion that ends the hosts' processes; and as the
simulated TPU VMs are made: refused in a stocked-out zone, CREATING before READY."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.test_watch import FAST, finish, wait_for
from tpuops import catalog
from tpuops.cloud.base import TpuRequest
from tpuops.cloud.compute_tpu import ComputeTpuApi, TpuVmRequest
from tpuops.cloud.local import make_cloud
from tpuops.cloud.local.apis import LocalCloud
from tpuops.cloud.local.compute_tpus import LocalComputeTpus
from tpuops.errors import CapacityError

LABELS = {"tpuops-cluster": "ironwood"}


def request_for(accelerator: str, **changes: object) -> TpuVmRequest:
    shape = catalog.load().compute_shape(accelerator)
    assert shape is not None
    return TpuVmRequest(name="ironwood", zone="local", accelerator_type=accelerator, machine_type=shape.machine_type,
                        hosts=shape.hosts, image_project=shape.image_project, image_family=shape.image_family,
                        boot_disk_type=shape.boot_disk_type, boot_disk_gb=shape.boot_disk_gb, topology=shape.topology,
                        labels=LABELS, **changes)  # type: ignore[arg-type]


def test_slice_on_this_machine(tmp_path: Path) -> None:
    api: ComputeTpuApi | None = make_cloud(tmp_path).compute_tpus
    assert api is not None
    made = api.create_tpu_vm(request_for("tpu7x-32", provisioning="spot"))
    assert made.state == "READY" and [h.rank for h in made.hosts] == [0, 1, 2, 3]
    assert [h.rank for h in sorted(made.hosts, key=lambda h: h.instance)] != [0, 1, 2, 3]
    assert all(Path(h.home or "").is_dir() for h in made.hosts)
    assert [s.name for s in api.find_tpu_vms(LABELS)] == ["ironwood"]
    assert api.find_tpu_vms({"tpuops-cluster": "other"}) == []

    home = Path(made.hosts[1].home or "")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={"HOME": str(home)})
    try:
        # The simulator finds a host's processes by their HOME: only once the child has exec'd is it there (until
        # then /proc shows the parent's environment, and under load that window is long enough to be seen).
        environ = Path(f"/proc/{sleeper.pid}/environ")
        deadline = time.monotonic() + 10
        while f"HOME={home}".encode() not in environ.read_bytes().split(b"\0") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert f"HOME={home}".encode() in environ.read_bytes().split(b"\0"), "the sleeper never ran as the host"
        api.preempt("ironwood", rank=1)  # type: ignore[attr-defined]
        assert sleeper.wait(timeout=10) is not None  # the host's processes end with it
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    seen = api.get_tpu_vm("local", "ironwood")
    assert seen is not None and seen.state == "PREEMPTED" and seen.hosts[1].preempted

    api.delete_tpu_vm("local", "ironwood")
    assert api.get_tpu_vm("local", "ironwood") is None and not home.exists()
    api.delete_tpu_vm("local", "ironwood")  # gone already: no error


def test_single_host_and_broken_slice(tmp_path: Path) -> None:
    api = make_cloud(tmp_path).compute_tpus
    assert api is not None
    one = api.create_tpu_vm(request_for("v6e-8"))
    assert (one.state, [(h.rank, h.instance) for h in one.hosts]) == ("READY", [(0, "ironwood")])
    api.delete_tpu_vm("local", "ironwood")
    api.create_tpu_vm(request_for("tpu7x-16"))
    api.break_slice("ironwood")  # type: ignore[attr-defined]
    seen = api.get_tpu_vm("local", "ironwood")
    assert seen is not None and seen.state == "BROKEN"


def test_a_slice_through_the_cli_on_the_simulator_broken_then_made_again(tmp_path: Path, tpuops_home: Path) -> None:
    """up -> run --watch: the slice BROKEN (its topology FAILED, the trainers still running) is deleted and made
    again whole, the run resumed on both ranks; --down deletes it at the end."""
    log = tmp_path / "attempts"
    command = (f'echo "rank=$TPUOPS_WORKER_ID restart=${{TPUOPS_RESTART:-0}}" >> {log}; '
               '[ "${TPUOPS_RESTART:-0}" -ge 1 ] || sleep 300')
    spec = write_spec(tmp_path, f"""
        name: ironlocal
        provider: local
        tpu: {{type: tpu7x-16, spot: true}}
        trainer: {{framework: jax, command: {json.dumps(command)}}}
        """)

    def starts() -> list[str]:
        return sorted(log.read_text().splitlines()) if log.exists() else []

    process = subprocess.Popen([sys.executable, "-m", "tpuops", "run", str(spec), "--watch", "--down"],
                               env={**os.environ, **FAST}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(starts()) == 2, "the first start on both ranks", process)
        api = make_cloud(tpuops_home / "local").compute_tpus
        api.break_slice("ironlocal")  # type: ignore[union-attr]
        code, _, stderr = finish(process)
    finally:
        if process.poll() is None:  # the test failed before the run ended: stop the watch before tearing down
            process.kill()
            process.communicate(timeout=10)
        run_cli("down", "ironlocal", "--yes", timeout=60)
    assert code == 0, stderr[-3000:]
    assert "TPU BROKEN: recovering" in stderr
    assert starts() == ["rank=0 restart=0", "rank=0 restart=1", "rank=1 restart=0", "rank=1 restart=1"]
    assert not (tpuops_home / "local" / "tpu_vms" / "ironlocal.json").exists()  # --down after the run succeeded


def test_the_guard_recreates_a_preempted_spot_slice_once(tmp_path: Path, tpuops_home: Path) -> None:
    """The guard's loop (`watch --headless`): a Spot host preempted (`simulate preempt`) is seen on two polls, then
    the whole slice deleted and made again, and the run relaunched: one preemption, one restart in its ledger."""
    from tests.test_guard_local import FAST as GUARD_FAST
    from tests.test_guard_local import kinds, ledger_of, wait_until
    from tpuops.guard.lease import read_lease

    spec = write_spec(tmp_path, """
        name: irong
        provider: local
        tpu: {type: tpu7x-16, spot: true}
        bucket: {name: irong-b}
        trainer: {framework: jax, command: "sleep 300"}
        """)
    env = {**GUARD_FAST}
    assert run_cli("up", str(spec), env=env).returncode == 0
    assert run_cli("launch", "irong", env=env).returncode == 0
    guard = subprocess.Popen([sys.executable, "-m", "tpuops", "watch", "irong", "--headless"],
                             env={**os.environ, **GUARD_FAST}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    ledger = ledger_of(tpuops_home, "irong-b", "irong")
    try:
        wait_until(lambda: read_lease(ledger.store)[0], "the guard to take the lease")
        preempted = run_cli("simulate", "preempt", "irong", env=env)
        assert preempted.returncode == 0, preempted.stderr
        wait_until(lambda: "restart" in kinds(ledger), "the relaunch")
    finally:
        if guard.poll() is None:
            os.killpg(guard.pid, signal.SIGTERM)
        output = guard.communicate(timeout=30)[0]
        events = [event for _, event in ledger.events()]
        run_cli("down", "irong", "--yes", "--delete-bucket", "--force", env=env)
    seen = [event.kind for event in events]
    assert seen.count("preemption") == 1 and seen.count("restart") == 1, output
    preemption = next(event for event in events if event.kind == "preemption")
    assert "TPU PREEMPTED" in preemption.message, preemption
    api = make_cloud(tpuops_home / "local").compute_tpus
    assert api is not None and api.get_tpu_vm("local", "irong") is None  # down deleted the slice made again


def test_a_stocked_out_zone_refuses_a_compute_tpu_as_it_refuses_a_tpu_vm(tmp_path: Path) -> None:
    """`tpuops simulate stockout` holds for tpu.api: compute: the same CapacityError as a TPU VM's, nothing made."""
    cloud = make_cloud(tmp_path)
    api = cloud.compute_tpus
    assert api is not None
    LocalCloud(tmp_path).stock_out("local", 600)
    with pytest.raises(CapacityError) as compute_refused:
        api.create_tpu_vm(request_for("tpu7x-16"))
    with pytest.raises(CapacityError) as vm_refused:
        cloud.tpus.create_node(TpuRequest(name="ironwood", zone="local", accelerator_type="v2-8", runtime="r"))
    assert "the simulated zone is out of capacity for" in compute_refused.value.message
    assert _without_seconds(compute_refused.value) == _without_seconds(vm_refused.value)
    assert api.get_tpu_vm("local", "ironwood") is None and not (tmp_path / "workers" / "ironwood").exists()

    LocalCloud(tmp_path).stock_out("local", 0)  # capacity again
    assert api.create_tpu_vm(request_for("tpu7x-16")).state == "READY"


def _without_seconds(err: CapacityError) -> tuple[str, str | None]:
    return re.sub(r"for \d+s more", "for Ns more", err.message), err.hint


class WatchedComputeTpus(LocalComputeTpus):
    """The simulator itself, with what a reader would see after each of its writes noted down."""

    seen: list[tuple[str, str]]

    def _write(self, record: Mapping[str, object]) -> None:
        super()._write(record)
        found = self.get_tpu_vm(str(record["zone"]), str(record["name"]))
        self.seen.append((found.state, found.detail) if found else ("MISSING", ""))


def test_a_create_passes_through_creating(tmp_path: Path) -> None:
    """Recorded CREATING (hosts STAGING, no homes yet) before its hosts are made, then READY: what an interrupted
    `up` finds again and `down` deletes."""
    api = WatchedComputeTpus(tmp_path)
    api.seen = []
    made = api.create_tpu_vm(request_for("tpu7x-16"))
    assert api.seen == [("CREATING", "0 of 2 hosts running"), ("READY", "")]
    assert made.state == "READY" and made.topology_state == "ACTIVE"


def test_a_tpu7x_up_on_a_stocked_out_zone_fails_with_nothing_made(tmp_path: Path, tpuops_home: Path) -> None:
    """Through the CLI: `up` of an api: compute TPU in a zone `simulate stockout` took out says there is no
    capacity and makes nothing; once the stockout is lifted, the same `up` makes it."""
    spec = write_spec(tmp_path, """
        name: ironout
        provider: local
        zone: sim-west1-a
        tpu: {type: tpu7x-8}
        """)
    assert run_cli("simulate", "stockout", "sim-west1-a", "--for", "10m").returncode == 0
    try:
        refused = run_cli("up", str(spec), "--yes", env=FAST)
        assert refused.returncode != 0
        assert "no capacity" in refused.stderr and "simulate stockout" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        assert not (tpuops_home / "local" / "tpu_vms" / "ironout.json").exists()
        assert run_cli("simulate", "stockout", "sim-west1-a", "--for", "0").returncode == 0
        made = run_cli("up", str(spec), "--yes", env=FAST)
        assert made.returncode == 0, made.stderr[-3000:]
        assert json.loads((tpuops_home / "local" / "tpu_vms" / "ironout.json").read_text())["zone"] == "sim-west1-a"
    finally:
        run_cli("down", "ironout", "--yes", timeout=60)
    assert not (tpuops_home / "local" / "tpu_vms" / "ironout.json").exists()
