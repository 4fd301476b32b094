"""The guard VM as a resource kind, with the real google-cloud-compute client against the Compute wire fake:
what it is created with (machine type, labels, scope, service account, startup script, no secret in metadata),
adoption, someone else's VM left alone, and `status`/`down` finding it by label apart from a client VM."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.cloud import PROJECT, FakeGcp, start_fake_gcp
from tests.fakes.compute import FakeInstance
from tests.gcs_emulator import GcsEmulator, gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli
from tpuops.cloud.base import Cloud
from tpuops.cloud.gcp import make_cloud
from tpuops.cloud.kinds.guard_vm import GuardVmSettings, ensure_guard_vm
from tpuops.errors import CloudError

ZONE = "us-central1-a"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PUBLIC_KEY = "ada:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBq ada"


@pytest.fixture(scope="module")
def gcp(gcs_emulator: GcsEmulator) -> Iterator[FakeGcp]:  # noqa: F811
    fake = start_fake_gcp(gcs_emulator.host)
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def cloud(gcp: FakeGcp) -> Cloud:
    return make_cloud(gcp.env, PROJECT)


def settings(cluster: str, **changes: object) -> GuardVmSettings:
    values: dict[str, object] = dict(cluster=cluster, zone=ZONE, machine_type="e2-micro", service_account=None,
                                     labels={"team": "nlp"}, startup_script="#!/bin/sh\necho guard\n",
                                     ssh_keys=PUBLIC_KEY)
    return GuardVmSettings(**{**values, **changes})  # type: ignore[arg-type]


def fresh() -> str:
    return f"night-{uuid.uuid4().hex[:6]}"


def test_the_guard_vm_is_created_small_labelled_scoped_and_with_its_startup_script(gcp: FakeGcp,
                                                                                    cloud: Cloud) -> None:
    name = fresh()
    vm, created = ensure_guard_vm(cloud, settings(name))
    assert created and vm.name == f"{name}-guard" and vm.state == "RUNNING" and vm.machine_type == "e2-micro"
    instance = gcp.compute.instances[(ZONE, f"{name}-guard")]
    assert instance.machine_type == f"zones/{ZONE}/machineTypes/e2-micro"
    assert instance.labels == {"team": "nlp", "tpuops-cluster": name, "tpuops-role": "guard"}
    assert instance.service_accounts == {gcp.compute.default_service_account: [SCOPE]}
    assert instance.tags == ["tpuops-guard"]
    assert instance.metadata["startup-script"] == "#!/bin/sh\necho guard\n"
    assert instance.metadata["ssh-keys"] == PUBLIC_KEY
    assert not any("PRIVATE KEY" in value for value in instance.metadata.values())


def test_the_spec_may_name_the_guards_service_account(gcp: FakeGcp, cloud: Cloud) -> None:
    name = fresh()
    ensure_guard_vm(cloud, settings(name, service_account="guard@p.iam.gserviceaccount.com",
                                    machine_type="e2-small"))
    instance = gcp.compute.instances[(ZONE, f"{name}-guard")]
    assert instance.service_accounts == {"guard@p.iam.gserviceaccount.com": [SCOPE]}
    assert instance.machine_type.endswith("/e2-small")


def test_a_guard_vm_that_exists_is_adopted_not_created_again(gcp: FakeGcp, cloud: Cloud) -> None:
    name = fresh()
    ensure_guard_vm(cloud, settings(name))
    inserts = len(gcp.compute_api.server.calls("POST", r"/instances$"))
    vm, created = ensure_guard_vm(cloud, settings(name))
    assert not created and vm.name == f"{name}-guard"
    assert len(gcp.compute_api.server.calls("POST", r"/instances$")) == inserts


def test_a_vm_of_that_name_without_the_guard_labels_is_left_alone(gcp: FakeGcp, cloud: Cloud) -> None:
    name = fresh()
    gcp.compute.instances[(ZONE, f"{name}-guard")] = FakeInstance(f"{name}-guard", ZONE, "e2-micro",
                                                                  labels={"tpuops-cluster": name}, status="RUNNING")
    with pytest.raises(CloudError, match="is not this cluster's guard"):
        ensure_guard_vm(cloud, settings(name))
    assert (ZONE, f"{name}-guard") in gcp.compute.instances


def test_status_and_down_without_state_tell_the_guard_vm_from_a_client_vm(gcp: FakeGcp, cloud: Cloud,
                                                                        tpuops_home: Path) -> None:
    name = fresh()
    ensure_guard_vm(cloud, settings(name))
    gcp.compute.instances[(ZONE, f"{name}-client")] = FakeInstance(
        f"{name}-client", ZONE, "n1-standard-2", labels={"tpuops-cluster": name}, status="RUNNING")

    status = run_cli("status", name, "--json", env=gcp.env)
    assert status.returncode == 0, status.stderr
    rows = {(row["kind"], row["name"]) for row in json.loads(status.stdout)["resources"]}
    assert rows == {("guard_vm", f"{name}-guard"), ("client_vm", f"{name}-client")}

    down = run_cli("down", name, "--yes", "--json", env=gcp.env)
    assert down.returncode == 0, down.stderr
    deleted = [(d["kind"], d["name"]) for d in json.loads(down.stdout)["deleted"]]
    assert sorted(deleted) == [("client_vm", f"{name}-client"), ("guard_vm", f"{name}-guard")]
    assert (ZONE, f"{name}-guard") not in gcp.compute.instances
    # The guard went first: left running, it would see its TPU gone and create it again.
    deletes = [r.path for r in gcp.compute_api.server.calls("DELETE", rf"/instances/{name}-")]
    assert deletes[0].endswith(f"/{name}-guard")


def test_down_with_state_finds_the_guard_vm_in_the_clusters_zone(gcp: FakeGcp, cloud: Cloud, tmp_path: Path,
                                                                tpuops_home: Path) -> None:
    from tests.helpers import write_spec

    name = fresh()
    spec = write_spec(tmp_path, f"""
        name: {name}
        zone: {ZONE}
        tpu: {{type: v2-8, runtime: tpu-ubuntu2204-base}}
        """)
    assert run_cli("up", str(spec), env=gcp.env).returncode == 0
    ensure_guard_vm(cloud, settings(name))
    down = run_cli("down", name, "--yes", "--json", env=gcp.env)
    assert down.returncode == 0, down.stderr
    assert ("guard_vm", f"{name}-guard") in [(d["kind"], d["name"]) for d in json.loads(down.stdout)["deleted"]]
    assert (ZONE, f"{name}-guard") not in gcp.compute.instances


def test_plan_live_names_the_firewall_rule_the_guard_would_need(gcp: FakeGcp, tmp_path: Path) -> None:
    from tests.helpers import write_spec

    def plan(network: str) -> str:
        path = write_spec(tmp_path, f"""
            name: night
            zone: {ZONE}
            tpu: {{type: v2-8, runtime: tpu-ubuntu2204-base, network: {network}}}
            guard: {{enabled: true}}
            """)
        result = run_cli("plan", str(path), "--live", env=gcp.env)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "firewall rule" not in plan("default").replace("a firewall rule letting it reach", "")
    isolated = " ".join(plan("isolated").split())
    assert "no firewall rule of network isolated lets the guard reach the workers on tcp:22" in isolated
    assert ("gcloud compute firewall-rules create night-guard-ssh --network=isolated --direction=INGRESS "
            "--allow=tcp:22 --source-tags=tpuops-guard") in isolated


def test_a_guard_vm_stopped_by_hand_is_started_again(gcp: FakeGcp, cloud: Cloud) -> None:
    name = fresh()
    ensure_guard_vm(cloud, settings(name))
    gcp.compute.instances[(ZONE, f"{name}-guard")].status = "TERMINATED"
    vm, created = ensure_guard_vm(cloud, settings(name))
    assert not created and vm.state == "RUNNING"
    assert gcp.compute_api.server.calls("POST", rf"/instances/{name}-guard/start$")
