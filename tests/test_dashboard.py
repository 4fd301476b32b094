"""The dashboard's JSON and its server, on a local cluster made by `tpuops up` whose ledger, event files and
incident are written by the real writers (the Ledger, TensorBoard's EventFileWriter, the watchdog's records).
The page itself in a real browser: tests/test_dashboard_browser.py."""

from __future__ import annotations

import collections
import http.client
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.logs_writers import TbWriter, simple_event
from tests.test_held_state import reads  # noqa: F401  (pytest fixture: counts spec and state reads)
from tpuops.cloud.blobs import DirBlobStore
from tpuops.context import Context
from tpuops.dashboard.board import Board
from tpuops.dashboard.hours import BUCKETS
from tpuops.dashboard.server import DashboardServer
from tpuops.errors import TpuopsError
from tpuops.guard.goodput import Goodput, Tick, observe
from tpuops.guard.ledger import Heartbeat, Ledger
from tpuops.watchdog.records import Incident, write_incident


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A local cluster (up, no run) with a bucket and a logdir in it, in a home of its own shared by this module's
    tests; torn down afterwards."""
    home = tmp_path_factory.mktemp("dash-home")
    name = f"dash-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path_factory.mktemp("dash-spec"), f"""
        name: {name}
        provider: local
        tpu: {{type: v2-8}}
        bucket: {{name: {name}-b}}
        logs: {{tensorboard: gs://{name}-b/logs}}
        trainer: {{framework: jax, command: "sleep 1"}}
        """)
    up = run_cli("up", str(spec), env={"TPUOPS_HOME": str(home)})
    assert up.returncode == 0, up.stderr
    try:
        yield name, home
    finally:
        run_cli("down", name, "--yes", "--delete-bucket", env={"TPUOPS_HOME": str(home)})


@pytest.fixture(scope="module")
def history(cluster: tuple[str, Path]) -> Iterator[tuple[TbWriter, float]]:
    writer, start = write_history(cluster)
    try:
        yield writer, start
    finally:
        writer.close()


@pytest.fixture
def board(cluster: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> Board:
    monkeypatch.setenv("TPUOPS_HOME", str(cluster[1]))
    return Board(Context.from_env(), feed_interval=0.0)


def bucket_dir(cluster: tuple[str, Path]) -> Path:
    name, home = cluster
    return home / "local" / "buckets" / f"{name}-b"


def write_history(cluster: tuple[str, Path]) -> tuple[TbWriter, float]:
    """Steps 1..50 and, after a preemption and a restart, 41..60 again; the guard's events and heartbeat; an
    incident of a hang at step 60."""
    name, _ = cluster
    logdir = bucket_dir(cluster) / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    start = time.time() - 600
    writer = TbWriter(logdir)
    for step in range(1, 51):
        writer.event(simple_event(step, {"loss": 1.0 / step}, wall_time=start + 60 + step))
    for step in range(41, 61):
        writer.event(simple_event(step, {"loss": 1.0 / step}, wall_time=start + 200 + step))
    clock = iter([start + 50, start + 115, start + 130, start + 160, start + 180, start + 241])
    ledger = Ledger(DirBlobStore(bucket_dir(cluster) / ".tpuops" / name / "guard"), "guard@test", clock.__next__)
    for kind, message, data in [
            ("watch", "watching run r1", {}), ("preemption", "TPU PREEMPTED", {"step_before": 50}),
            ("recovery", "creating the TPU again (v2-8)", {"phase": "provisioning"}),
            ("recovery", "TPU ready again", {"phase": "setup"}), ("restart", "run r1 relaunched as restart 1", {}),
            ("recovered", "training resumed at step 41", {"step_before": 50, "first_step_after": 41,
                                                          "steps_lost": 10})]:
        ledger.append(kind, message, **data)
    tally = observe(observe(Goodput(), Tick(start, "READY", (1,))), Tick(start + 100, "READY", (50,)))
    ledger.write_heartbeat(Heartbeat(time.time(), "guard@test", "guard", "r1", 60, "READY", 1, 10, tally, 60.0))
    records = DirBlobStore(bucket_dir(cluster) / ".tpuops" / name)
    incident = Incident(at="2026-11-27T10:00:00+00:00", run_id="r1", kind="stall", odd_worker="w0", last_step=60,
                        quiet_for=900.0, threshold=600.0, action="restart", reason="no new step for 15m")
    write_incident(records, incident, {"w0/stacks.txt": "Thread 1 (idle): MainThread\n    stuck (train.py:9)\n",
                                       "w0/output.txt": "step 60\n"})
    return writer, start


def test_the_json_of_a_cluster_after_a_preemption_and_a_hang(cluster: tuple[str, Path], board: Board,
                                                            history: tuple[TbWriter, float]) -> None:
    name, _ = cluster
    writer, start = history
    overview = next(c for c in board.clusters(wait=True)["clusters"] if c["name"] == name)
    assert overview["tpu_state"] == "READY" and overview["zone"] and overview["tpu_type"] == "v2-8"
    assert overview["goodput"]["paid_s"] == 100.0 and overview["goodput"]["runtime_goodput"] <= 1.0
    assert overview["last_event"]["kind"] == "recovered" and overview["errors"] == {}
    status = json.loads(run_cli("status", name, "--json", env={"TPUOPS_HOME": str(cluster[1])}).stdout)
    assert status["recovery_guard"]["goodput"] == overview["goodput"]  # the same numbers as `status --json`
    recorded = json.loads((cluster[1] / "clusters" / name / "state.json").read_text())
    assert "pool" in overview and overview["pool"] == recorded.get("pool")  # where the TPU was placed, as recorded

    doc = board.cluster(name, wait=True)
    loss = doc["scalars"]["."]["loss"]
    assert [p[0] for p in loss] == [*range(1, 51), *range(41, 61)]
    assert {(m["kind"], m["step"]) for m in doc["markers"]} >= {("preemption", 50), ("recovery", 41), ("hang", 60)}
    assert [e["kind"] for e in doc["ledger"]][:2] == ["watch", "preemption"]
    [incident] = doc["incidents"]
    assert incident["odd_worker"] == "w0" and "stuck (train.py:9)" in incident["files"]["w0"]["stacks.txt"]
    assert incident["files"]["w0"]["output.txt"] == "step 60\n"
    json.dumps(doc, allow_nan=False)  # what the server sends

    # Incremental: a refresh with nothing new reads no byte of the event files; new steps cost only their bytes.
    read = doc["bytes_read"]
    assert board.cluster(name)["bytes_read"] == read
    size = writer.path.stat().st_size
    writer.event(simple_event(61, {"loss": float("nan")}, wall_time=start + 262))
    again = board.cluster(name)
    assert again["bytes_read"] - read == writer.path.stat().st_size - size
    assert tuple(again["scalars"]["."]["loss"][-1][:2]) == (61, None)  # a NaN loss: JSON has no NaN


def test_where_the_hours_went_adds_up_over_the_range(cluster: tuple[str, Path], board: Board,
                                                     history: tuple[TbWriter, float]) -> None:
    name, _ = cluster
    now = time.time()
    doc = board.hours(now - 3600, now)
    rows = doc["clusters"][name]
    assert sum(rows[b]["seconds"] for b in BUCKETS) == pytest.approx(rows["wall"]["seconds"], abs=0.5)
    assert rows["advancing"]["seconds"] <= rows["paid"]["seconds"] <= rows["wall"]["seconds"]
    assert rows["lost"]["seconds"] > 0 and rows["provisioning"]["seconds"] > 0
    assert rows["paid"]["chip_hours"] == pytest.approx(rows["paid"]["seconds"] / 3600 * 4, abs=1e-3)  # v2-8: 4 chips
    # The simulator's TPUs are free, as `status` says: no dollars anywhere, and "simulator" where a price would be.
    assert {(row["dollars"], row["free"]) for row in rows.values()} == {(0.0, "simulator")}
    assert {(row["dollars"], row["free"]) for row in doc["total"].values()} == {(0.0, "simulator")}
    shown = json.loads(run_cli("status", name, "--json", env={"TPUOPS_HOME": str(cluster[1])}).stdout)
    assert shown["guard"]["cost"]["per_hour"] == 0.0  # what `status` says of the same cluster
    assert doc["total"]["wall"]["seconds"] >= rows["wall"]["seconds"]
    narrow = board.hours(now - 1, now)["clusters"][name]
    assert narrow["wall"]["seconds"] <= 1.0 + 1e-6


def test_a_request_reads_each_clusters_spec_once(cluster: tuple[str, Path], history: tuple[TbWriter, float],
                                                 reads: collections.Counter[str],  # noqa: F811
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every document reads a cluster's state and spec once and hands them on (the feed, the overview, the
    price). The live status is TPU API calls of its own, cached: kept fresh here so no request refreshes it."""
    name, home = cluster
    monkeypatch.setenv("TPUOPS_HOME", str(home))
    board = Board(Context.from_env(), feed_interval=0.0, live_ttl=3600.0)
    assert board.names() == [name]
    board.cluster(name, wait=True)  # the live status read, and the feed's readers opened (once per board)
    for document in (board.clusters, lambda: board.cluster(name), lambda: board.hours(time.time() - 3600, time.time())):
        reads.clear()
        document()
        assert dict(reads) == {"spec": 1, "state": 1}


def test_a_free_cluster_adds_no_dollars_and_a_priced_one_keeps_its_own() -> None:
    from tpuops.dashboard.hours import Price, hours_of, total
    from tpuops.guard.goodput import Segment

    held = [Segment(0.0, 3600.0, "advancing", True)]
    priced, free = hours_of(held, 0.0, 3600.0, Price(4, 8.0)), hours_of(held, 0.0, 3600.0, Price(4, 8.0, "simulator"))
    assert (priced["paid"]["dollars"], "free" in priced["paid"]) == (8.0, False)
    assert (free["paid"]["dollars"], free["paid"]["free"]) == (0.0, "simulator")
    both = total([priced, free])
    assert (both["paid"]["dollars"], "free" in both["paid"]) == (8.0, False)
    assert total([free, free])["paid"]["free"] == "simulator"


@pytest.fixture
def server(board: Board) -> Iterator[DashboardServer]:
    served = DashboardServer(("127.0.0.1", 0), lambda: board)
    thread = served.serve_in_thread(poll_interval=0.05)
    try:
        yield served
    finally:
        served.shutdown()
        served.server_close()
        thread.join(timeout=10)


def request(server: DashboardServer, method: str, path: str,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_the_server_serves_its_page_and_data_and_nothing_else(server: DashboardServer,
                                                             cluster: tuple[str, Path]) -> None:
    assert server.server_address[0] == "127.0.0.1"
    status, headers, body = request(server, "GET", "/")
    page = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "<script src" not in page and "https://" not in page and "//cdn" not in page  # works offline
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    status, _, body = request(server, "GET", "/api/clusters")
    assert status == 200 and cluster[0] in [c["name"] for c in json.loads(body)["clusters"]]
    for path in ("/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/page.html", "/tpuops/dashboard/page.html",
                 "/api/cluster?name=../../etc", "/api/cluster?name=", "//etc/passwd"):
        status, _, body = request(server, "GET", path)
        assert status == 404 and b"root:" not in body, path
    assert request(server, "GET", "/api/hours?from=nan")[0] == 400
    for method in ("POST", "PUT", "DELETE"):
        assert request(server, method, "/api/clusters")[0] == 405
    port = server.server_address[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1:1"):  # a rebound DNS name, another port
        assert request(server, "GET", "/api/clusters", {"Host": host})[0] == 421, host
    for host in (f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert request(server, "GET", "/", {"Host": host})[0] == 200, host


def test_a_busy_port_is_one_line_and_no_server(server: DashboardServer) -> None:
    result = run_cli("dashboard", "--port", str(server.server_address[1]), timeout=60)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "--port" in result.stderr, result.stderr


def test_the_page_comes_first_and_a_board_that_cannot_start_is_one_error() -> None:
    def broken() -> Board:
        raise TpuopsError("cannot read the state directory", "check TPUOPS_HOME")

    served = DashboardServer(("127.0.0.1", 0), broken)
    thread = served.serve_in_thread(poll_interval=0.05)
    try:
        assert request(served, "GET", "/")[0] == 200
        status, _, body = request(served, "GET", "/api/clusters")
        assert status == 503 and "cannot read the state directory" in json.loads(body)["error"]
    finally:
        served.shutdown()
        served.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl-c", "term", "hup"])
def test_the_command_stops_on_each_signal_with_its_code(tmp_path: Path, signum: int) -> None:
    """Ctrl-C, SIGTERM (`kill`) and SIGHUP (a closed terminal) stop it, with 128 + the signal as every command."""
    said = tmp_path / "out"
    with said.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "tpuops", "dashboard", "--port", "0"], stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "tpuops dashboard on http://127.0.0.1:" not in said.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "http://127.0.0.1:" in said.read_text(), said.read_text()
        process.send_signal(signum)
        assert process.wait(timeout=30) == 128 + signum, said.read_text()
        assert "Traceback" not in said.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
