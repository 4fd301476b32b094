"""`GcpGuardHost`, the GCP provider's GuardHost: the guard VM on the Compute wire fake (real google-cloud-compute
client), the wheel staged in the bucket (GCS emulator), the cluster's key copied over SSH to a real sshd on
loopback standing for the VM. Checked before anything is created: a firewall rule that lets the guard reach the
workers' SSH port; a 403 names the role and leaves nothing behind."""

from __future__ import annotations

import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.fakes.cloud import PROJECT, FakeGcp, start_fake_gcp
from tests.gcs_emulator import GcsEmulator, gcs_emulator  # noqa: F401  (pytest fixture)
from tests.sshd import SshdCluster, sshd_available
from tpuops.cloud.gcp import make_cloud
from tpuops.errors import CloudError, PermissionDenied, RemoteError, TpuopsError
from tpuops.providers.base import Login
from tpuops.providers.blob_urls import open_blob_store
from tpuops.providers.gcp_guard_host import GcpGuardHost, GuardVmLayout
from tpuops.providers.guard_host import GuardPlacement

pytestmark = pytest.mark.skipif(not sshd_available(), reason="needs sshd and root")
ZONE = "us-west1-b"


@dataclass
class Rig:
    gcp: FakeGcp
    sshd: SshdCluster
    root: Path
    bucket: str

    def host(self, ssh_wait: float = 30.0, refresh: str | None = None) -> GcpGuardHost:
        cloud = make_cloud(self.gcp.env, PROJECT)
        layout = GuardVmLayout(home=str(self.root / "guard-home"), user="root",
                               refresh=refresh or f"touch {self.root / 'refreshed'}")
        return GcpGuardHost(lambda: cloud, lambda url: open_blob_store(url, env=self.gcp.env),
                            self.root / "wheels", layout, ssh_wait=ssh_wait, host_key_wait=2.0)

    def placement(self, **changes: object) -> GuardPlacement:
        cluster = f"night-{uuid.uuid4().hex[:6]}"
        cluster_dir = self.root / "clusters" / cluster
        cluster_dir.mkdir(parents=True)
        key = cluster_dir / "id_ed25519"
        key.write_bytes(self.sshd.client_key.read_bytes())
        key.chmod(0o600)
        key.with_suffix(".pub").write_text(self.sshd.client_key.with_suffix(".pub").read_text())
        login = Login("root", key, cluster_dir / "known_hosts")
        placement = GuardPlacement(cluster, PROJECT, ZONE, "e2-micro", None, self.bucket, {"team": "nlp"},
                                   ssh_port=self.sshd.port, login=login)
        return replace(placement, **changes)  # type: ignore[arg-type]

    def guard_key(self, cluster: str) -> Path:
        return self.root / "guard-home" / "clusters" / cluster / "id_ed25519"


@pytest.fixture(scope="module")
def rig(gcs_emulator: GcsEmulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:  # noqa: F811
    root = tmp_path_factory.mktemp("guard-host")
    gcp = start_fake_gcp(gcs_emulator.host)
    sshd = SshdCluster(root / "sshd", 1)
    try:
        sshd.start_all()
        vm = sshd.workers[0]
        gcp.compute.external_ip = lambda name, n: vm.host
        gcp.compute.host_keys = lambda name: [vm.published_key()]
        yield Rig(gcp, sshd, root, gcs_emulator.new_bucket("guard"))
    finally:
        sshd.close()
        gcp.stop()


def staged(rig: Rig, prefix: str, bucket_name: str | None = None) -> dict[str, bytes]:
    bucket = rig.gcp.storage().bucket(bucket_name or rig.bucket)
    return {blob.name[len(prefix):]: blob.download_as_bytes() for blob in bucket.list_blobs(prefix=prefix)}


def writes(rig: Rig, bucket: str) -> tuple[int, int]:
    """How many calls so far created or changed something: VM inserts, and object writes in `bucket`."""
    inserts = len(rig.gcp.compute_api.server.calls("POST", r"/instances$"))
    objects = sum(len(rig.gcp.gcs.calls(method, rf"/b/{bucket}/o")) for method in ("POST", "PUT", "PATCH", "DELETE"))
    return inserts, objects


def test_guard_up_creates_the_vm_stages_the_wheel_and_copies_the_key_over_ssh_only(rig: Rig) -> None:
    placement = rig.placement()
    prefix = f".tpuops/{placement.cluster}/guard/bundle/"
    info = rig.host().ensure(placement, f"gs://{rig.bucket}/.tpuops/{placement.cluster}/guard")

    assert (info.kind, info.name, info.zone, info.state) == ("vm", f"{placement.cluster}-guard", ZONE, "running")
    instance = rig.gcp.compute.instances[(ZONE, f"{placement.cluster}-guard")]
    assert instance.labels == {"team": "nlp", "tpuops-cluster": placement.cluster, "tpuops-role": "guard"}
    assert "tpuops watch \"$CLUSTER\"" not in instance.metadata["startup-script"]  # values are assigned, quoted
    assert f"CLUSTER={placement.cluster}" in instance.metadata["startup-script"]
    assert f"BUNDLE_PREFIX={prefix}" in instance.metadata["startup-script"]  # apart from lease and ledger
    objects = staged(rig, prefix)
    current = objects["wheels/CURRENT"].decode()
    assert current.startswith("tpuops-") and objects[f"wheels/{current}"][:2] == b"PK"  # a zip: the wheel

    # The private key: on the guard's disk, 0600, and nowhere in the metadata or the bucket.
    assert placement.login is not None
    secret = placement.login.key_path.read_bytes()
    copied = rig.guard_key(placement.cluster)
    assert copied.read_bytes() == secret and stat.S_IMODE(copied.stat().st_mode) == 0o600
    body = b"".join(secret.splitlines()[1:3])
    assert not any(body in value.encode() or "PRIVATE KEY" in value for value in instance.metadata.values())
    assert not any(body in data or b"PRIVATE KEY" in data for data in objects.values())
    # The VM's published host key was pinned: the first connection did not trust whatever answered.
    assert rig.sshd.workers[0].host_key_line().split()[1:] == \
        (placement.login.known_hosts_path.read_text().split()[1:3])


def test_guard_up_again_adopts_the_vm_and_refreshes_it(rig: Rig) -> None:
    placement = rig.placement()
    host = rig.host()
    host.ensure(placement, f".tpuops/{placement.cluster}/guard")
    inserts = len(rig.gcp.compute_api.server.calls("POST", r"/instances$"))
    (rig.root / "refreshed").unlink(missing_ok=True)
    info = host.ensure(placement, f".tpuops/{placement.cluster}/guard")
    assert info.state == "running"
    assert len(rig.gcp.compute_api.server.calls("POST", r"/instances$")) == inserts
    assert (rig.root / "refreshed").exists()  # the startup script was asked to run again
    assert info.detail is not None and "not refreshed" not in info.detail

    assert host.describe(placement.cluster) == info

    broken = rig.host(refresh="echo no such unit >&2; exit 5")
    assert "not refreshed (no such unit): it runs the code and spec it had" in (broken.ensure(
        placement, f".tpuops/{placement.cluster}/guard").detail or "")
    assert host.delete(placement.cluster) is True
    assert host.describe(placement.cluster) is None and host.delete(placement.cluster) is False


def test_a_network_without_a_rule_for_the_guard_is_refused_before_anything_is_created(rig: Rig) -> None:
    placement = rig.placement(network="isolated")
    prefix = f".tpuops/{placement.cluster}/guard/bundle/"
    inserts = len(rig.gcp.compute_api.server.calls("POST", r"/instances$"))
    with pytest.raises(CloudError) as caught:
        rig.host().check(placement)
    assert "no firewall rule of network isolated lets it in on tcp:" in caught.value.message
    assert caught.value.hint is not None and "--network=isolated" in caught.value.hint
    assert f"--allow=tcp:{rig.sshd.port} --source-tags=tpuops-guard" in caught.value.hint
    assert len(rig.gcp.compute_api.server.calls("POST", r"/instances$")) == inserts
    assert staged(rig, prefix) == {}


def test_a_local_step_that_fails_is_refused_by_check_before_anything_is_created(rig: Rig) -> None:
    placement = rig.placement()
    blocked = rig.root / f"wheels-{placement.cluster}"
    blocked.write_text("a file where the wheel cache's directory goes")
    host = GcpGuardHost(lambda: make_cloud(rig.gcp.env, PROJECT), lambda url: open_blob_store(url, env=rig.gcp.env),
                        blocked, GuardVmLayout(home=str(rig.root / "guard-home"), user="root"))
    calls = len(rig.gcp.compute_api.server.calls("GET", r"/firewalls"))
    with pytest.raises(TpuopsError, match="could not build the tpuops wheel for the guard: ") as caught:
        host.check(placement)
    assert str(blocked) in caught.value.message
    assert len(rig.gcp.compute_api.server.calls("GET", r"/firewalls")) == calls  # no cloud call at all
    rig.host().check(placement)  # the same with a cache it can write: the firewall is asked then
    assert len(rig.gcp.compute_api.server.calls("GET", r"/firewalls")) > calls


def test_a_rule_naming_the_guards_tag_is_enough(rig: Rig) -> None:
    from tests.fakes.compute import FakeFirewall

    placement = rig.placement(network="tagged")
    rig.gcp.compute.firewalls["tagged-guard"] = FakeFirewall(
        "tagged-guard", network="tagged", allowed=[("tcp", [f"{rig.sshd.port}"])], source_tags=["tpuops-guard"])
    try:
        host = rig.host()
        host.check(placement)
        assert host.ensure(placement, f".tpuops/{placement.cluster}/guard").state == "running"
    finally:
        del rig.gcp.compute.firewalls["tagged-guard"]


@pytest.mark.parametrize(("message", "role"), [
    ("Required 'compute.instances.create' permission for 'projects/p/zones/z/instances/x'",
     "roles/compute.instanceAdmin.v1"),
    ("The user does not have access to service account 'guard@p.iam.gserviceaccount.com'. User: 'ada'. Ask a "
     "project owner to grant you the iam.serviceAccountUser role on the service account",
     "roles/iam.serviceAccountUser on guard@p.iam.gserviceaccount.com"),
])
def test_a_403_names_the_missing_role_and_leaves_nothing_behind(rig: Rig, message: str, role: str) -> None:
    placement = rig.placement(service_account="guard@p.iam.gserviceaccount.com")
    prefix = f".tpuops/{placement.cluster}/guard/bundle/"
    rig.gcp.compute_api.server.faults.http_error("POST", r"/instances$", 403, message=message)
    with pytest.raises(PermissionDenied) as caught:
        rig.host().ensure(placement, f".tpuops/{placement.cluster}/guard")
    assert f"(missing role: {role})" in caught.value.message and "\n" not in caught.value.message
    assert (ZONE, f"{placement.cluster}-guard") not in rig.gcp.compute.instances
    assert staged(rig, prefix) == {}


def test_a_vm_created_by_a_guard_up_that_then_failed_is_deleted_again(rig: Rig) -> None:
    placement = rig.placement(ssh_port=1)  # nothing answers SSH there
    with pytest.raises(RemoteError, match="could not copy the cluster's key to guard VM") as caught:
        rig.host(ssh_wait=1.0).ensure(placement, f".tpuops/{placement.cluster}/guard")
    assert caught.value.hint is not None and "must reach the VM at" in caught.value.hint
    assert (ZONE, f"{placement.cluster}-guard") not in rig.gcp.compute.instances


def test_guard_up_on_the_cli_creates_the_vm_that_status_lists_and_down_deletes(rig: Rig, tmp_path: Path,
                                                                             tpuops_home: Path) -> None:
    import json

    from tests.helpers import run_cli, write_spec

    name = f"night-{uuid.uuid4().hex[:6]}"
    body = f"""
        name: {name}
        zone: {ZONE}
        tpu: {{type: v2-8, runtime: tpu-ubuntu2204-base, network: NETWORK}}
        bucket: {{name: {name}-b}}
        ssh: {{user: root, port: {rig.sshd.port}}}
        guard: {{zone: us-west1-a}}
        """
    spec = write_spec(tmp_path, body.replace("NETWORK", "default"))
    assert run_cli("up", str(spec), env=rig.gcp.env).returncode == 0
    cluster_key = tpuops_home / "clusters" / name / "id_ed25519"
    authorized = rig.sshd.root / "authorized_keys"
    authorized.write_text(authorized.read_text() + cluster_key.with_suffix(".pub").read_text())
    env = {**rig.gcp.env, "TPUOPS_GUARD_VM_HOME": str(rig.root / "guard-home"), "TPUOPS_GUARD_VM_USER": "root"}

    # Refused or failed first: the firewall is judged before the bundle is staged, and a first guard up whose VM
    # cannot be created takes its staged copies away again.
    bundle = f".tpuops/{name}/guard/bundle/"
    # Every local step comes before the first call that creates something: a wheel that cannot be built leaves
    # neither a bundle nor a VM.
    wheel_cache = tpuops_home / "cache" / "wheels"
    wheel_cache.parent.mkdir(parents=True, exist_ok=True)
    wheel_cache.write_text("not a directory")
    writes_before = writes(rig, f"{name}-b")
    unbuilt = run_cli("guard", "up", name, env=env)
    assert unbuilt.returncode != 0 and "could not build the tpuops wheel for the guard" in unbuilt.stderr, \
        unbuilt.stderr
    assert len(unbuilt.stderr.strip().splitlines()) <= 2 and "Traceback" not in unbuilt.stderr
    assert writes(rig, f"{name}-b") == writes_before  # not created then deleted: never created
    wheel_cache.unlink()
    rig.gcp.compute_api.server.faults.http_error("POST", r"/instances$", 403,
                                                 message="Required 'compute.instances.create' permission")
    denied = run_cli("guard", "up", name, env=env)
    assert denied.returncode != 0 and "roles/compute.instanceAdmin.v1" in denied.stderr, denied.stderr
    assert staged(rig, bundle, f"{name}-b") == {}
    write_spec(tmp_path, body.replace("NETWORK", "isolated"))  # guard up reads the spec as it is now
    refused = run_cli("guard", "up", name, env=env)
    assert refused.returncode != 0 and "no firewall rule of network isolated" in refused.stderr, refused.stderr
    assert staged(rig, bundle, f"{name}-b") == {} and ("us-west1-a", f"{name}-guard") not in rig.gcp.compute.instances
    write_spec(tmp_path, body.replace("NETWORK", "default"))

    up = run_cli("guard", "up", name, "--json", env=env)
    assert up.returncode == 0, up.stderr
    instance = rig.gcp.compute.instances[("us-west1-a", f"{name}-guard")]
    assert instance.machine_type.endswith("/e2-micro") and instance.labels["tpuops-role"] == "guard"
    assert rig.guard_key(name).read_bytes() == cluster_key.read_bytes()
    assert cluster_key.read_bytes() not in up.stdout.encode() + up.stderr.encode()

    # `guard up` again refreshes what changed in the bundle, and only that.
    code = f".tpuops/{name}/guard/bundle/clusters/{name}/spec/code/"
    generations = {blob.name: blob.generation for blob in rig.gcp.storage().list_blobs(f"{name}-b", prefix=code)}
    assert set(generations) == {code + "spec.yaml"}  # the spec's own directory is the code here
    (tmp_path / "train.py").write_text("print('hi')\n")
    again = run_cli("guard", "up", name, env=env)
    assert again.returncode == 0, again.stderr
    after = {blob.name: blob.generation for blob in rig.gcp.storage().list_blobs(f"{name}-b", prefix=code)}
    assert after == {**generations, code + "train.py": after[code + "train.py"]}
    (tmp_path / "train.py").unlink()
    assert run_cli("guard", "up", name, env=env).returncode == 0
    assert {blob.name for blob in rig.gcp.storage().list_blobs(f"{name}-b", prefix=code)} == set(generations)

    status = run_cli("status", name, "--json", env=env)
    assert status.returncode == 0, status.stderr
    rows = {(row["kind"], row["name"], row["zone"]) for row in json.loads(status.stdout)["resources"]}
    assert ("guard_vm", f"{name}-guard", "us-west1-a") in rows

    down = run_cli("down", name, "--yes", env=env)
    assert down.returncode == 0, down.stderr
    assert ("us-west1-a", f"{name}-guard") not in rig.gcp.compute.instances
