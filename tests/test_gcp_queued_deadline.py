"""Queued resources never outlive the wait: valid_until travels in the request, Google drops a request not granted
in time, and a wait that ends any other way (timeout, Ctrl-C) withdraws the request. Real tpu_v2 client, wire fake."""

from __future__ import annotations

import _thread
import signal
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.fakes.cloud import PROJECT, FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.tpu_model import EXPIRED_MESSAGE
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tpuops.cloud.base import QueuedResource, TpuRequest
from tpuops.cloud.gcp import make_cloud
from tpuops.cloud.queued import QueuedLeftBehind, create_queued_within, waiting_age, withdraw_queued
from tpuops.errors import CapacityError, CloudError
from tpuops.spec import CLUSTER_LABEL

ZONE = "us-central2-b"


@pytest.fixture
def gcp(fake_gcp: FakeGcp) -> FakeGcp:  # noqa: F811  (the imported fixture, under a short name)
    return fake_gcp


def request_for(cluster: str) -> TpuRequest:
    return TpuRequest(name=f"{cluster}-tpu", zone=ZONE, accelerator_type="v4-8", runtime="tpu-ubuntu2204-base",
                      spot=True, labels={CLUSTER_LABEL: cluster})


def new_cluster() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def test_valid_until_travels_in_the_request(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    queued = make_cloud(gcp.env, PROJECT).queued.create_queued(
        f"{cluster}-qr", request_for(cluster), wait_seconds=30, valid_until=7200)

    assert queued.state == "ACTIVE" and queued.created_at is not None
    [created] = gcp.tpu_v2.server.calls("POST", r"/queuedResources$")
    assert created.body["queueingPolicy"] == {"validUntilDuration": "7200s"}
    assert gcp.tpu.queued[(ZONE, f"{cluster}-qr")].valid_until == 7200


def test_fractions_of_a_second_round_up_and_no_valid_until_sends_no_policy(gcp: FakeGcp) -> None:
    cloud = make_cloud(gcp.env, PROJECT)
    first, second = new_cluster(), new_cluster()
    cloud.queued.create_queued(f"{first}-qr", request_for(first), wait_seconds=30, valid_until=90.2)
    cloud.queued.create_queued(f"{second}-qr", request_for(second), wait_seconds=30)
    bodies = [call.body for call in gcp.tpu_v2.server.calls("POST", r"/queuedResources$")]
    assert bodies[0]["queueingPolicy"] == {"validUntilDuration": "91s"} and "queueingPolicy" not in bodies[1]


def test_google_drops_a_request_not_granted_before_its_deadline(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    gcp.tpu.queued_seconds = 3600  # no capacity for an hour
    cloud = make_cloud(gcp.env, PROJECT)
    with pytest.raises(CapacityError, match="FAILED") as failure:
        cloud.queued.create_queued(f"{cluster}-qr", request_for(cluster), wait_seconds=60, valid_until=1)
    assert EXPIRED_MESSAGE in failure.value.message
    assert cloud.queued.get_queued(ZONE, f"{cluster}-qr").state == "FAILED"
    assert (ZONE, f"{cluster}-tpu") not in gcp.tpu.nodes


def test_a_wait_that_times_out_leaves_no_queued_resource(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    gcp.tpu.queued_seconds = 3600
    cloud = make_cloud(gcp.env, PROJECT)
    with pytest.raises(CloudError):
        create_queued_within(cloud.queued, f"{cluster}-qr", request_for(cluster), wait_seconds=1, cluster=cluster)
    [created] = gcp.tpu_v2.server.calls("POST", r"/queuedResources$")
    assert created.body["queueingPolicy"] == {"validUntilDuration": "1s"}
    [deleted] = gcp.tpu_v2.server.calls("DELETE", rf"/queuedResources/{cluster}-qr$")
    assert deleted.query["force"] == "true"
    assert (ZONE, f"{cluster}-qr") not in gcp.tpu.queued and (ZONE, f"{cluster}-tpu") not in gcp.tpu.nodes


def interrupt_when_queued(gcp: FakeGcp, name: str, timeout: float = 30.0) -> threading.Thread:
    """Press Ctrl-C (KeyboardInterrupt in the main thread) once the fake holds the queued resource."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (ZONE, name) in gcp.tpu.queued:
                _thread.interrupt_main()
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_while_waiting_deletes_the_queued_resource(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    gcp.tpu.queued_seconds = 3600
    cloud = make_cloud(gcp.env, PROJECT)
    # (Ctrl-C raises KeyboardInterrupt only where Python handles SIGINT: not in a test run in the background of a
    # shell without job control, which inherits it ignored)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        watcher = interrupt_when_queued(gcp, f"{cluster}-qr")
        with pytest.raises(KeyboardInterrupt):
            create_queued_within(cloud.queued, f"{cluster}-qr", request_for(cluster), wait_seconds=60,
                                 cluster=cluster)
        watcher.join(timeout=5)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert (ZONE, f"{cluster}-qr") not in gcp.tpu.queued
    assert cloud.queued.find_queued({CLUSTER_LABEL: cluster}) == []


def test_a_failed_withdrawal_says_what_is_still_queued(gcp: FakeGcp) -> None:
    cluster = new_cluster()
    gcp.tpu.queued_seconds = 3600
    gcp.tpu_v2.server.faults.http_error("DELETE", r"/queuedResources/", 403, times=-1, message="denied")
    cloud = make_cloud(gcp.env, PROJECT)
    with pytest.raises(QueuedLeftBehind) as failure:
        create_queued_within(cloud.queued, f"{cluster}-qr", request_for(cluster), wait_seconds=1, cluster=cluster)
    assert failure.value.message.startswith(f"queued resource {cluster}-qr in {ZONE} is still queued")
    assert f"`tpuops down {cluster}`" in failure.value.hint and "--force" in failure.value.hint
    assert isinstance(failure.value.__cause__, CloudError)  # why the wait ended
    assert (ZONE, f"{cluster}-qr") in gcp.tpu.queued  # the message is true: it is still there


def test_another_clusters_request_is_never_withdrawn(gcp: FakeGcp) -> None:
    owner, intruder = new_cluster(), new_cluster()
    gcp.tpu.queued_seconds = 3600
    cloud = make_cloud(gcp.env, PROJECT)
    with pytest.raises(CloudError):
        cloud.queued.create_queued(f"{owner}-qr", request_for(owner), wait_seconds=0.1)
    withdrawn = withdraw_queued(cloud.queued, ZONE, f"{owner}-qr", cluster=intruder,
                                owned_if={CLUSTER_LABEL: intruder})
    assert not withdrawn and (ZONE, f"{owner}-qr") in gcp.tpu.queued
    assert withdraw_queued(cloud.queued, ZONE, f"{owner}-qr", cluster=owner, owned_if={CLUSTER_LABEL: owner})
    assert (ZONE, f"{owner}-qr") not in gcp.tpu.queued
    assert not withdraw_queued(cloud.queued, ZONE, f"{owner}-qr", cluster=owner)  # already gone: nothing to do


def test_waiting_age() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    waiting = QueuedResource("q", ZONE, "WAITING_FOR_RESOURCES", created_at=now - timedelta(minutes=70))
    assert waiting_age(waiting, now) == 4200
    assert waiting_age(QueuedResource("q", ZONE, "ACTIVE", created_at=now), now) is None
    assert waiting_age(QueuedResource("q", ZONE, "PROVISIONING"), now) is None  # creation time unknown


def test_a_rerun_up_keeps_a_queued_resource_still_waiting_in_its_pool(gcp: FakeGcp, tmp_path: Path) -> None:
    """With tpu.pools, `up` run again finds the queued resource it recorded: still waiting for capacity (no node
    yet) it is the cluster's place in the queue, kept, not deleted as dead."""
    from tests.helpers import write_spec
    from tpuops.cloud.kinds.base import Job, Ledger
    from tpuops.ops.placement import kept_pool
    from tpuops.ops.specs import load_checked
    from tpuops.state import ClusterState, StateStore

    cluster = new_cluster()
    spec = load_checked(write_spec(tmp_path, f"""
        name: {cluster}
        project: {PROJECT}
        tpu:
          queued: true
          pools:
            - {{type: v4-8, zone: {ZONE}, provisioning: spot}}
            - {{type: v4-8, zone: us-central2-a, provisioning: spot}}
        bucket: {{name: {cluster}-data}}
        """))
    gcp.tpu.queued_seconds = 3600  # no capacity: the request waits
    cloud = make_cloud(gcp.env, PROJECT)
    with pytest.raises(CapacityError):
        cloud.queued.create_queued(f"{cluster}-qr", request_for(cluster), wait_seconds=0.2)
    assert cloud.queued.get_queued(ZONE, f"{cluster}-qr").state != "ACTIVE"
    state = ClusterState(name=cluster, provider="gcp", project=PROJECT, zone=ZONE,
                         spec_path=str(tmp_path / "spec.yaml"))
    ledger = Ledger(StateStore(tmp_path / "home"), state)
    ledger.record("queued_resource", f"{cluster}-qr", ZONE, "creating")

    pool = kept_pool(Job(spec, cloud, ledger))

    assert pool is not None and pool.zone == ZONE
    assert cloud.queued.get_queued(ZONE, f"{cluster}-qr") is not None  # still queued
    assert not gcp.tpu_v2.server.calls("DELETE", rf"/queuedResources/{cluster}-qr$")
