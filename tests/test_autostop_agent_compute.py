"""The autostop agent deleting a TPU made by Compute Engine (tpu.api: compute) with the VM's own token: a slice's
managed instance group (its VMs go with it) or a single-host instance, through the Compute REST fake, as a real
detached process on a simulated worker 0 (the fixtures of test_autostop_agent.py)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fakes.cloud import PROJECT, FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.metadata import MetadataFake
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.test_autostop_agent import Worker0, metadata, start, wait_for, worker0  # noqa: F401  (fixtures)
from tests.test_autostop_agent import config_for as tpu_config
from tpuops import catalog
from tpuops.autostop.remote import AgentConfig
from tpuops.cloud.compute_tpu import TpuVmRequest
from tpuops.cloud.gcp import make_cloud

ZONE = "us-central1-c"


def make_tpu(gcp: FakeGcp, cluster: str, accelerator: str, labels: dict[str, str] | None = None) -> str:
    """A Compute Engine TPU made through the adapter, as `up` makes it."""
    name = f"ct-{uuid.uuid4().hex[:6]}"
    shape = catalog.load().compute_shape(accelerator)
    assert shape is not None
    api = make_cloud(gcp.env, PROJECT).compute_tpus
    assert api is not None
    api.create_tpu_vm(TpuVmRequest(
        name=name, zone=ZONE, accelerator_type=accelerator, machine_type=shape.machine_type, hosts=shape.hosts,
        image_project=shape.image_project, image_family=shape.image_family, boot_disk_type=shape.boot_disk_type,
        boot_disk_gb=shape.boot_disk_gb, topology=shape.topology,
        labels={"tpuops-cluster": cluster} if labels is None else labels))
    return name


def config_for(worker: Worker0, gcp: FakeGcp, metadata: MetadataFake, name: str, group: bool,  # noqa: F811
               bucket: str | None = None) -> AgentConfig:
    base = tpu_config(worker, gcp, metadata, name, idle="1s", bucket=bucket)
    return replace(base, zone=ZONE, api="compute", group=group, tpu_endpoint=None,
                   compute_endpoint=gcp.compute_api.server.url)


def test_an_idle_slice_is_deleted_by_its_group_with_the_vm_token(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0) -> None:  # noqa: F811
    name = make_tpu(fake_gcp, worker0.cluster, "tpu7x-16")
    tpus = fake_gcp.compute_tpus
    assert tpus is not None and (ZONE, name) in tpus.groups
    bucket = f"tpuops-b-{uuid.uuid4().hex[:8]}"
    fake_gcp.storage().create_bucket(bucket)
    start(worker0, config_for(worker0, fake_gcp, metadata, name, group=True, bucket=bucket))

    wait_for("the idle slice to be deleted", lambda: (ZONE, name) not in tpus.groups)
    [delete] = fake_gcp.compute_api.server.calls("DELETE", rf"/zones/{ZONE}/instanceGroupManagers/{name}$")
    assert delete.headers["authorization"] in {f"Bearer {t}" for t in metadata.tokens_issued}
    assert not any(i.group == name for i in fake_gcp.compute.instances.values())  # its VMs went with it
    assert fake_gcp.compute_api.server.calls("GET", rf"/global/instanceTemplates/{name}-it$")  # labels read there
    assert not fake_gcp.compute_api.server.calls("DELETE", r"/instances/")
    # Free, and left for `down` or the next `up`: this VM is gone before it could delete them.
    assert f"{name}-it" in tpus.templates
    blob = fake_gcp.storage().bucket(bucket).blob(f".tpuops/{worker0.cluster}/autostop.json")
    assert json.loads(blob.download_as_bytes())["node"] == name
    wait_for("the final decision", lambda: worker0.report().state == "deleted")


def test_an_idle_single_host_vm_is_deleted(fake_gcp: FakeGcp, metadata: MetadataFake,  # noqa: F811
                                            worker0: Worker0) -> None:  # noqa: F811
    name = make_tpu(fake_gcp, worker0.cluster, "v6e-8")
    start(worker0, config_for(worker0, fake_gcp, metadata, name, group=False))

    wait_for("the idle VM to be deleted", lambda: (ZONE, name) not in fake_gcp.compute.instances)
    assert len(fake_gcp.compute_api.server.calls("DELETE", rf"/zones/{ZONE}/instances/{name}$")) == 1
    assert not fake_gcp.compute_api.server.calls("DELETE", r"/instanceGroupManagers/")


@pytest.mark.parametrize("accelerator", ["tpu7x-16", "v6e-8"])
def test_a_tpu_without_the_clusters_label_is_never_deleted(fake_gcp: FakeGcp, metadata: MetadataFake,  # noqa: F811
                                                          worker0: Worker0, accelerator: str) -> None:  # noqa: F811
    name = make_tpu(fake_gcp, worker0.cluster, accelerator, labels={"tpuops-cluster": "someone-else"})
    start(worker0, config_for(worker0, fake_gcp, metadata, name, group=accelerator == "tpu7x-16"))

    wait_for("the agent to refuse", lambda: worker0.report().state == "refused")
    wait_for("the agent to exit", lambda: not worker0.report().running)
    assert not fake_gcp.compute_api.server.calls("DELETE", r"/zones/")
    assert (ZONE, name) in fake_gcp.compute.instances or any(i.group == name for i in
                                                             fake_gcp.compute.instances.values())


def test_autostop_through_the_cli_deletes_a_simulated_slice_and_up_brings_it_back(tmp_path: Path,
                                                                                  tpuops_home: Path) -> None:
    """`up` with autostop on a local TPU7x slice: the agent on worker 0 is told it is a Compute Engine group, deletes
    the slice when idle, `status` says why, and `up` makes it again."""
    from tests.helpers import run_cli, write_spec

    env = {"TPUOPS_AUTOSTOP_TICK": "0.2"}
    name = f"as-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, f"""
        name: {name}
        provider: local
        tpu: {{type: tpu7x-16, spot: true}}
        bucket: {{name: {name}-b}}
        autostop: {{idle: 30m}}
        trainer: {{framework: jax, command: "true"}}
        """)
    record = tpuops_home / "local" / "tpu_vms" / f"{name}.json"
    try:
        up = run_cli("up", str(spec), env=env)
        assert up.returncode == 0 and "autostop: agent running on w0" in up.stdout, up.stderr
        config = json.loads((tpuops_home / "local" / "workers" / name / "w0" / "tpuops" / name / "autostop" /
                             "config.json").read_text())
        assert (config["api"], config["group"], config["local"]["node_record"]) == ("compute", True, str(record))
        assert run_cli("autostop", name, "1s", env=env).returncode == 0
        wait_for("the idle slice to be deleted", lambda: not record.exists())
        wait_for("the agent's record", lambda: (tpuops_home / "local" / "buckets" / f"{name}-b" / ".tpuops" / name /
                                                "autostop.json").exists())
        gone = run_cli("status", name, env=env)
        assert gone.returncode == 0 and "TPU deleted by autostop at" in gone.stdout, gone.stdout + gone.stderr
        # (without a new limit the 1s one is kept, and the agent may delete the new slice before it is looked at)
        again = run_cli("up", str(spec), "--autostop", "30m", env=env)
        assert again.returncode == 0 and record.exists(), again.stderr
    finally:
        run_cli("down", name, "--yes", "--delete-bucket", "--force", env=env)
    assert not record.exists()
