"""The local simulator answers ComputeTpuApi as the Compute Engine adapter does: hosts in rank order apart from
their names, a preemption and a broken slice seen as such, deletion that ends the hosts' processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tpuops import catalog
from tpuops.cloud.compute_tpu import ComputeTpuApi, TpuVmRequest
from tpuops.cloud.local import make_cloud

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
