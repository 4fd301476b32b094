"""Multislice through one queued resource, at the adapter: the request carries multislice_params instead of
node_id, Google names the nodes PREFIX-0..N-1, a lost slice suspends the whole request, and deleting it (force)
takes every node. Real tpu_v2 client against the wire fake."""

from __future__ import annotations

import uuid

import pytest

from tests.fakes.cloud import PROJECT, FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tpuops.cloud.base import TpuRequest
from tpuops.cloud.gcp import make_cloud
from tpuops.spec import CLUSTER_LABEL

ZONE = "us-central2-b"


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def request_for(cluster: str, slices: int) -> TpuRequest:
    return TpuRequest(name=cluster, zone=ZONE, accelerator_type="v4-16", runtime="tpu-ubuntu2204-base",
                      labels={CLUSTER_LABEL: cluster}, slices=slices)


def new_cluster() -> str:
    return f"ms-{uuid.uuid4().hex[:8]}"


def test_two_slices_come_up_as_nodes_named_from_the_prefix(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    cloud = make_cloud(gcp.env, PROJECT)
    queued = cloud.queued.create_queued(f"{cluster}-qr", request_for(cluster, 2), wait_seconds=30)

    assert queued.state == "ACTIVE"
    assert queued.node_names == (f"{cluster}-0", f"{cluster}-1") and queued.node_name == f"{cluster}-0"
    [created] = gcp.tpu_v2.server.calls("POST", r"/queuedResources$")
    [spec] = created.body["tpu"]["nodeSpec"]
    assert spec["multisliceParams"] == {"nodeCount": 2, "nodeIdPrefix": cluster} and "nodeId" not in spec
    for name in queued.node_names:
        node = cloud.tpu_api("vm").get_node(ZONE, name)
        assert node is not None and node.state == "READY" and len(node.workers) == 2  # v4-16: 2 hosts each
        assert node.labels[CLUSTER_LABEL] == cluster
    assert cloud.queued.get_queued(ZONE, f"{cluster}-qr").node_names == queued.node_names


def test_one_slice_keeps_node_id(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    queued = make_cloud(gcp.env, PROJECT).queued.create_queued(f"{cluster}-qr", request_for(cluster, 1),
                                                                 wait_seconds=30)
    [created] = gcp.tpu_v2.server.calls("POST", r"/queuedResources$")
    [spec] = created.body["tpu"]["nodeSpec"]
    assert spec["nodeId"] == cluster and "multisliceParams" not in spec
    assert queued.node_names == (cluster,)


def test_a_preempted_slice_suspends_the_request_and_delete_takes_every_node(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    cloud = make_cloud(gcp.env, PROJECT)
    queued = cloud.queued.create_queued(f"{cluster}-qr", request_for(cluster, 3), wait_seconds=30)
    gcp.tpu.preempt(ZONE, queued.node_names[1])

    assert cloud.queued.get_queued(ZONE, f"{cluster}-qr").state == "SUSPENDED"
    cloud.queued.delete_queued(ZONE, f"{cluster}-qr")
    assert cloud.queued.get_queued(ZONE, f"{cluster}-qr") is None
    assert all(cloud.tpu_api("vm").get_node(ZONE, name) is None for name in queued.node_names)


def test_found_by_label_with_every_slice_named(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    cloud = make_cloud(gcp.env, PROJECT)
    cloud.queued.create_queued(f"{cluster}-qr", request_for(cluster, 2), wait_seconds=30)
    [found] = cloud.queued.find_queued({CLUSTER_LABEL: cluster})
    assert found.node_names == (f"{cluster}-0", f"{cluster}-1")
