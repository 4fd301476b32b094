"""Finding a cluster by its label in every zone, through the real Google clients against the wire fakes."""

from __future__ import annotations

import uuid

import pytest

from tests.fakes.cloud import PROJECT, FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.compute import FakeInstance
from tests.fakes.tpu_model import FakeNode, FakeQueued
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tpuops.cloud.base import Cloud
from tpuops.cloud.gcp import make_cloud
from tpuops.ops.discover import SearchFailed, find_cluster
from tpuops.spec import CLUSTER_LABEL


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def opener(gcp: FakeGcp):  # noqa: ANN201
    return lambda project: make_cloud(gcp.env, project)


def add_node(gcp: FakeGcp, zone: str, name: str, cluster: str | None, mode: str = "vm") -> None:
    labels = {CLUSTER_LABEL: cluster} if cluster else {"team": "other"}
    gcp.tpu.nodes[(zone, name)] = FakeNode(name, zone, "v3-8", "tpu-vm-base", mode, state="READY", labels=labels)


def add_vm(gcp: FakeGcp, zone: str, name: str, cluster: str | None) -> None:
    labels = {CLUSTER_LABEL: cluster} if cluster else {}
    gcp.compute.instances[(zone, name)] = FakeInstance(name, zone, "n1-standard-4", labels=labels, status="RUNNING")


def add_bucket(gcp: FakeGcp, cluster: str | None) -> str:
    name = unique("tpuops-b")
    bucket = gcp.storage().bucket(name)
    bucket.labels = {CLUSTER_LABEL: cluster} if cluster else {"team": "other"}
    gcp.storage().create_bucket(bucket, location="europe-west4")
    return name


def v4_node(cluster: str, name: str) -> FakeNode:
    return FakeNode(name, "us-central2-b", "v4-8", "tpu-ubuntu2204-base", "vm", labels={CLUSTER_LABEL: cluster})


def populate(gcp: FakeGcp, cluster: str) -> dict[str, object]:
    """The cluster's resources spread over zones, and others' resources next to them."""
    other = unique("other")
    add_node(gcp, "europe-west4-a", f"{cluster}-a", cluster)
    add_node(gcp, "us-central1-f", f"{cluster}-f", cluster)
    add_node(gcp, "europe-west4-a", "someone-elses", other)
    add_node(gcp, "europe-west4-a", "unlabelled", None)
    add_node(gcp, "us-central1-b", f"{cluster}-legacy", cluster, mode="node")
    add_node(gcp, "us-central1-b", "legacy-of-other", other, mode="node")
    gcp.tpu.queued_seconds = 3600  # still waiting for capacity
    gcp.tpu.create_queued(FakeQueued(f"{cluster}-qr", "us-central2-b", v4_node(cluster, f"{cluster}-q")))
    gcp.tpu.create_queued(FakeQueued("queued-of-other", "us-central2-b", v4_node(other, "other-q")))
    add_vm(gcp, "europe-west4-a", f"{cluster}-client", cluster)
    add_vm(gcp, "us-east1-d", "vm-of-other", other)
    add_vm(gcp, "us-east1-d", "unlabelled-vm", None)
    return {"bucket": add_bucket(gcp, cluster), "other_bucket": add_bucket(gcp, other), "plain": add_bucket(gcp, None)}


def test_finds_every_labelled_resource_in_every_zone_and_nothing_else(gcp: FakeGcp) -> None:
    cluster = unique("c")
    made = populate(gcp, cluster)

    found = find_cluster(cluster, PROJECT, opener(gcp))

    assert sorted((n.zone, n.name, n.mode) for n in found.tpu_vms) == [
        ("europe-west4-a", f"{cluster}-a", "vm"), ("us-central1-f", f"{cluster}-f", "vm")]
    assert [(n.zone, n.name, n.mode) for n in found.tpu_nodes] == [("us-central1-b", f"{cluster}-legacy", "node")]
    assert [(q.zone, q.name, q.state, q.node_name) for q in found.queued] == [
        ("us-central2-b", f"{cluster}-qr", "ACCEPTED", f"{cluster}-q")]
    assert found.queued[0].created_at is not None
    assert [(vm.zone, vm.name) for vm in found.vms] == [("europe-west4-a", f"{cluster}-client")]
    assert [b.name for b in found.buckets] == [made["bucket"]]
    assert (found.project, found.zones, found.empty) == (PROJECT, (), False)
    # Asked once per kind with the every-zone location, and Compute filtered on the server.
    assert gcp.tpu_v2.server.calls("GET", r"/locations/-/nodes$")
    assert gcp.tpu_v2.server.calls("GET", r"/locations/-/queuedResources$")
    assert [r.parent for name, r in gcp.tpu_v1.calls if name == "ListNodes"] == [f"projects/{PROJECT}/locations/-"]
    listings = gcp.compute_api.server.calls("GET", r"/aggregated/instances$")  # plain VMs; Compute Engine TPUs
    assert [call.query["filter"] for call in listings] == [f'labels.{CLUSTER_LABEL} = "{cluster}"'] * 2


def test_a_queued_resources_node_is_not_counted_twice(gcp: FakeGcp) -> None:
    cluster = unique("c")
    gcp.tpu.create_queued(FakeQueued(f"{cluster}-qr", "us-central2-b", v4_node(cluster, f"{cluster}-q")))
    assert gcp.tpu.get_queued("us-central2-b", f"{cluster}-qr").state == "ACTIVE"  # granted: its node exists
    add_node(gcp, "us-central2-b", f"{cluster}-own", cluster)

    found = find_cluster(cluster, PROJECT, opener(gcp))

    assert [q.state for q in found.queued] == ["ACTIVE"]
    assert sorted(n.name for n in found.tpu_vms) == [f"{cluster}-own", f"{cluster}-q"]
    assert [n.name for n in found.tpu_vms_outside_queued()] == [f"{cluster}-own"]


def test_nothing_found_only_after_a_complete_search(gcp: FakeGcp) -> None:
    found = find_cluster(unique("gone"), PROJECT, opener(gcp))
    assert found.empty
    assert gcp.tpu_v2.server.calls("GET", r"/locations/-/nodes$") and gcp.gcs.calls("GET", r"/storage/v1/b$")


def test_named_zones_are_searched_one_by_one(gcp: FakeGcp) -> None:
    cluster = unique("c")
    add_node(gcp, "europe-west4-a", f"{cluster}-a", cluster)
    add_node(gcp, "us-central1-f", f"{cluster}-f", cluster)
    add_vm(gcp, "europe-west4-a", f"{cluster}-client", cluster)
    add_vm(gcp, "us-east1-d", f"{cluster}-far", cluster)

    found = find_cluster(cluster, PROJECT, opener(gcp), zones=["europe-west4-a"])

    assert [n.name for n in found.tpu_vms] == [f"{cluster}-a"]
    assert [vm.name for vm in found.vms] == [f"{cluster}-client"]
    assert found.zones == ("europe-west4-a",) and found.where == f"project {PROJECT}, europe-west4-a"
    assert not gcp.tpu_v2.server.calls("GET", r"/locations/-/") and not gcp.compute_api.server.calls(
        "GET", r"/aggregated/")
    listings = gcp.compute_api.server.calls("GET", r"/zones/europe-west4-a/instances$")  # VMs; Compute Engine TPUs
    assert [call.query["filter"] for call in listings] == [f'labels.{CLUSTER_LABEL} = "{cluster}"'] * 2
    assert gcp.compute_api.server.calls("GET", r"/zones/europe-west4-a/instanceGroupManagers$")


def deny_tpu_vms(gcp: FakeGcp) -> None:
    gcp.tpu_v2.server.faults.http_error("GET", r"/locations/-/nodes$", 403, message="'tpu.nodes.list' denied")


def deny_queued(gcp: FakeGcp) -> None:
    gcp.tpu_v2.server.faults.http_error("GET", r"/locations/-/queuedResources$", 403, message="denied")


def deny_legacy(gcp: FakeGcp) -> None:
    gcp.tpu_v1.faults.http_error("RPC", "ListNodes", 403, message="denied")


def deny_vms(gcp: FakeGcp) -> None:
    # Every listing (the VMs' and the Compute Engine TPUs' search both list instances): a role is missing for all
    # of them, and with one refusal only, whichever search asked first would be the one to fail.
    gcp.compute_api.server.faults.http_error("GET", r"/aggregated/instances$", 403, times=-1, message="denied")


def deny_buckets(gcp: FakeGcp) -> None:
    gcp.gcs.faults.http_error("GET", r"/storage/v1/b$", 403, message="denied")


@pytest.mark.parametrize(
    ("deny", "what"),
    [(deny_tpu_vms, "TPU VMs"), (deny_queued, "queued resources"), (deny_legacy, "TPU nodes"), (deny_vms, "VMs"),
     (deny_buckets, "buckets")],
)
def test_a_denied_list_fails_the_search_loudly(gcp: FakeGcp, deny, what: str) -> None:  # noqa: ANN001
    cluster = unique("c")
    populate(gcp, cluster)
    deny(gcp)

    with pytest.raises(SearchFailed) as failure:
        find_cluster(cluster, PROJECT, opener(gcp))

    assert failure.value.message.startswith(f"could not search project {PROJECT} for {what} of cluster {cluster}: ")
    assert "permission denied" in failure.value.message
    assert "--project" in failure.value.hint and "--zone" in failure.value.hint


def test_retries_exhausted_fail_the_search(gcp: FakeGcp) -> None:
    gcp.tpu_v2.server.faults.http_error("GET", r"/locations/-/queuedResources$", 503, times=-1)
    with pytest.raises(SearchFailed, match="for queued resources of cluster"):
        find_cluster(unique("c"), PROJECT, opener(gcp))
    assert len(gcp.tpu_v2.server.calls("GET", r"/locations/-/queuedResources$")) > 1  # retried before giving up


def test_an_unreachable_zone_makes_the_search_incomplete(gcp: FakeGcp) -> None:
    cluster = unique("c")
    add_node(gcp, "europe-west4-a", f"{cluster}-a", cluster)
    gcp.tpu.unreachable_zones.add("us-central1-f")
    with pytest.raises(SearchFailed, match="could not reach us-central1-f") as failure:
        find_cluster(cluster, PROJECT, opener(gcp))
    assert "--zone" in failure.value.hint
    # Searching the zones that answer works.
    assert [n.name for n in find_cluster(cluster, PROJECT, opener(gcp), zones=["europe-west4-a"]).tpu_vms] == [
        f"{cluster}-a"]


def test_without_a_project_nothing_is_searched() -> None:
    opened: list[str] = []

    def open_cloud(project: str) -> Cloud:
        opened.append(project)
        raise AssertionError("must not be called")

    with pytest.raises(SearchFailed, match="no GCP project known") as failure:
        find_cluster("c", None, open_cloud)
    assert "--project" in failure.value.hint and not opened


def test_missing_credentials_are_a_failed_search(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_API_ENDPOINT", "STORAGE_EMULATOR"))}
    env.pop("TPUOPS_TPU_V1_GRPC_ENDPOINT", None)
    monkeypatch.setenv("HOME", "/nonexistent-home")
    with pytest.raises(SearchFailed, match="no Google credentials found") as failure:
        find_cluster("c", "p", lambda project: make_cloud(env, project))
    assert "gcloud auth application-default login" in failure.value.hint
