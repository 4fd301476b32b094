"""The guard's lease, ledger arithmetic and webhook: the lease against stores that enforce compare-and-swap
(fake-gcs-server, whose 412s are GCS's, and the local provider's directory store)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fake_gcs import FakeGcs, fake_gcs  # noqa: F401  (pytest fixture)
from tests.fakes.http import SHUTDOWN_POLL_S
from tpuops.cloud.blobs import DirBlobStore
from tpuops.cloud.gcp.gcs_blobs import GcsBlobStore
from tpuops.guard.lease import Lease, LeaseLost, read_lease
from tpuops.guard.ledger import Ledger, role_for
from tpuops.guard.notify import Notifier
from tpuops.retry import transient


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["gcs", "dir"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "dir":
        return DirBlobStore(tmp_path / "guard")
    server: FakeGcs = request.getfixturevalue("fake_gcs")
    return GcsBlobStore(server.new_bucket(), ".tpuops/c1/guard", env=server.env,
                        policy=lambda: transient(attempts=2, sleep=lambda _: None))


def test_two_takers_of_a_free_lease_one_wins(store) -> None:
    clock = Clock()
    a, b = (Lease(store, name, "guard", 30.0, clock=clock) for name in ("guard@a", "guard@b"))
    results: dict[str, object] = {}
    start = threading.Barrier(2)

    def take(lease: Lease) -> None:
        start.wait(timeout=10)
        results[lease.holder] = lease.try_acquire()

    threads = [threading.Thread(target=take, args=(lease,)) for lease in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(lease.held for lease in (a, b)) == [False, True]
    loser = b if a.held else a
    assert results[loser.holder].holder == (a if a.held else b).holder  # the loser is told who holds it


def test_a_stale_lease_is_taken_over_and_the_old_holder_learns_it(store) -> None:
    clock = Clock()
    old = Lease(store, "guard@old", "guard", 30.0, clock=clock)
    new = Lease(store, "guard@new", "guard", 30.0, clock=clock)
    assert old.try_acquire() is None
    clock.now += 60  # two polls of silence: still live
    assert new.try_acquire() is not None and not new.held
    old.renew()
    clock.now += 91  # more than three polls of silence
    assert new.try_acquire() is None and new.held
    with pytest.raises(LeaseLost):
        old.renew()
    assert read_lease(store)[0].holder == "guard@new"


def test_a_restarted_holder_finds_its_own_lease(store) -> None:
    clock = Clock()
    first = Lease(store, "guard@vm", "guard", 30.0, clock=clock)
    assert first.try_acquire() is None
    acquired = read_lease(store)[0].acquired_at
    clock.now += 10
    again = Lease(store, "guard@vm", "guard", 30.0, clock=clock)  # same id after SIGKILL: no wait
    assert again.try_acquire() is None and again.held
    assert read_lease(store)[0].acquired_at == acquired
    again.release()
    assert read_lease(store)[0].holder is None
    assert Lease(store, "watch@laptop:1", "watch", 30.0, clock=clock).try_acquire() is None  # free again


def test_ledger_events_in_order_and_after(tmp_path: Path) -> None:
    ledger = Ledger(DirBlobStore(tmp_path), "guard@a")
    for kind in ("watch", "preemption", "recovered"):
        ledger.append(kind, f"{kind} happened", steps_lost=2)
    events = ledger.events()
    assert [e.kind for _, e in events] == ["watch", "preemption", "recovered"]
    assert [e.kind for _, e in ledger.events(after=events[0][0])] == ["preemption", "recovered"]


def test_role_for_a_denial() -> None:
    assert role_for("deleting tpu x: 403 Permission 'tpu.nodes.delete' denied") == "roles/tpu.admin"
    assert role_for("could not read the TPU's state: timed out") is None
    assert role_for("403 on compute instances insert") == "roles/compute.instanceAdmin.v1"


class Hook(BaseHTTPRequestHandler):
    received: list[dict] = []
    failures_left = 0

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if Hook.failures_left > 0:
            Hook.failures_left -= 1
            self.send_response(503)
        else:
            Hook.received.append(body)
            self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def test_webhook_retries_and_never_shows_its_url() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)
    thread.start()
    warnings: list[str] = []
    try:
        Hook.received.clear()
        Hook.failures_left = 2
        url = f"http://127.0.0.1:{server.server_port}/hooks/T000/SECRET-TOKEN"
        notifier = Notifier(url, "c1", warn=warnings.append, backoff=0.01)
        assert notifier.send("heartbeat", "not worth waking for") is False
        assert notifier.send("recovered", "training resumed at step 4", steps_lost=2) is True
        notifier.close(timeout=10)
        assert [(m["kind"], m["steps_lost"]) for m in Hook.received] == [("recovered", 2)]
        Hook.failures_left = 100
        notifier = Notifier(url, "c1", warn=warnings.append, backoff=0.01)
        notifier.send("gave-up", "max restarts used up")
        notifier.close(timeout=10)
        assert warnings and all("SECRET" not in w and "127.0.0.1" not in w for w in warnings)
        assert "SECRET" not in repr(notifier)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
