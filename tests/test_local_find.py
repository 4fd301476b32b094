"""The local provider answers the same label searches as Google's (`down NAME` without state, locally)."""

from __future__ import annotations

from pathlib import Path

from tpuops.cloud.base import TpuRequest, VmRequest
from tpuops.cloud.local import make_cloud
from tpuops.ops.discover import find_cluster
from tpuops.spec import CLUSTER_LABEL


def test_local_cloud_finds_its_labelled_resources(tmp_path: Path) -> None:
    cloud = make_cloud(tmp_path)
    ours, theirs = {CLUSTER_LABEL: "mine"}, {CLUSTER_LABEL: "theirs"}
    cloud.tpus.create_node(TpuRequest("mine-tpu", "local-a", "v3-8", "rt", labels=ours, workers=1))
    cloud.tpus.create_node(TpuRequest("their-tpu", "local-a", "v3-8", "rt", labels=theirs, workers=1))
    cloud.tpu_api("node").create_node(TpuRequest("mine-node", "local-a", "v2-8", "rt", "node", labels=ours, workers=1))
    cloud.queued.create_queued("mine-qr", TpuRequest("mine-q", "local-b", "v3-8", "rt", labels=ours, workers=1),
                               wait_seconds=1, valid_until=1)
    cloud.vms.create_vm(VmRequest("mine-client", "local-a", "n1", 10, "p", "f", labels=ours))
    cloud.storage.create_bucket("mine-bucket", "local", ours)
    cloud.storage.create_bucket("their-bucket", "local", theirs)

    found = find_cluster("mine", cloud.project, lambda project: cloud)

    assert sorted(node.name for node in found.tpu_vms) == ["mine-q", "mine-tpu"]
    assert [node.name for node in found.tpu_nodes] == ["mine-node"]  # each TPU once, under its own mode
    assert [node.name for node in found.tpu_vms_outside_queued()] == ["mine-tpu"]
    assert [(q.name, q.state) for q in found.queued] == [("mine-qr", "ACTIVE")]
    assert [vm.name for vm in found.vms] == ["mine-client"]
    assert [b.name for b in found.buckets] == ["mine-bucket"]
    assert [node.name for node in cloud.tpus.find_nodes(ours, zones=["local-b"])] == ["mine-q"]
    assert find_cluster("nobody", cloud.project, lambda project: cloud).empty
