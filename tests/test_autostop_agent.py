"""The autostop agent as it runs on worker 0: a real detached process (installed through a Runner) that talks
to the TPU v2 HTTP fake, the GCS emulator and a fake metadata server on loopback, with sub-second ticks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from tests.fakes.cloud import PROJECT, FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.metadata import DEFAULT_EMAIL, MetadataFake
from tests.fakes.tpu_model import FakeNode, FakeQueued
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tpuops.autostop.remote import AgentConfig, AgentReport, install_agent, read_agent, stop_agent
from tpuops.remote.local import LocalRunner, worker_path
from tpuops.shipped import script_command
from tpuops.spec.autostop import AutostopSpec

ZONE = "europe-west4-a"
TICK = 0.1
WAIT = 30.0  # upper bound of every wait; the agent acts within a few ticks
NETGUARD = str(Path(__file__).parent / "netguard")


def wait_for(what: str, check: Callable[[], object], timeout: float = WAIT) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@pytest.fixture
def metadata() -> Iterator[MetadataFake]:
    with MetadataFake() as fake:
        yield fake


@dataclass
class Worker0:
    """A simulated worker 0 (a home directory; commands run as local processes, the netguard loaded)."""

    home: Path
    cluster: str
    runner: LocalRunner = field(init=False)
    started: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.runner = LocalRunner("w0", self.home, {"PATH": worker_path(), "PYTHONPATH": NETGUARD})

    @property
    def base(self) -> Path:
        return self.home / "tpuops" / self.cluster

    def log(self) -> list[dict]:
        """The decisions written so far: complete lines only (the agent may be writing the next one as we read)."""
        path = self.base / "autostop.log"
        complete = path.read_text().split("\n")[:-1] if path.exists() else []
        return [json.loads(line) for line in complete]

    def actions(self) -> list[str]:
        return [entry["action"] for entry in self.log()]

    def report(self) -> AgentReport:
        return read_agent(self.runner, self.cluster, log_lines=5)

    def start_run(self, run_id: str, command: str) -> None:
        result = self.runner.run(script_command("start", self.cluster, run_id, command), capture=True, timeout=30)
        assert result.ok, result.stderr

    def stop_run(self, run_id: str) -> None:
        result = self.runner.run(script_command("stop", self.cluster, run_id, "5"), capture=True, timeout=30)
        assert result.ok, result.stderr

    def hold_device(self) -> subprocess.Popen:
        """A process holding the worker's TPU device open (as a trainer outside tpuops would)."""
        device = self.home / "dev" / "accel0"
        device.parent.mkdir(parents=True, exist_ok=True)
        device.write_text("")
        code = "import sys, time; handle = open(sys.argv[1]); print('open', flush=True); time.sleep(120)"
        process = subprocess.Popen([sys.executable, "-c", code, str(device)], stdout=subprocess.PIPE,
                                   start_new_session=True)
        self.started.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() == b"open"
        return process

    def close(self) -> None:
        stop_agent(self.runner, self.cluster, keep_alive=False)
        for run_dir in (self.base / "runs").glob("*"):
            self.stop_run(run_dir.name)
        for process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture
def worker0(tmp_path: Path) -> Iterator[Worker0]:
    worker = Worker0(tmp_path / "w0", f"c-{uuid.uuid4().hex[:6]}")
    try:
        yield worker
    finally:
        worker.close()


def make_node(gcp: FakeGcp, cluster: str, labels: dict[str, str] | None = None) -> str:
    name = f"n-{uuid.uuid4().hex[:6]}"
    node = FakeNode(name=name, zone=ZONE, accelerator_type="v3-8", runtime="tpu-vm-tf-2.16.1-pjrt", mode="vm",
                    labels={"tpuops-cluster": cluster} if labels is None else labels)
    gcp.tpu.create_node(node)
    assert gcp.tpu.get_node(ZONE, name, "vm").state == "READY"
    return name


def config_for(worker: Worker0, gcp: FakeGcp, metadata: MetadataFake, node: str, *, idle: str | None = "1s",
               max_hours: float | None = None, created_at: float | None = None, queued: str | None = None,
               bucket: str | None = None) -> AgentConfig:
    setting = AutostopSpec(idle=idle, max_hours=max_hours)
    return AgentConfig(
        cluster=worker.cluster, provider="gcp", project=PROJECT, zone=ZONE, node=node, queued=queued,
        idle_seconds=setting.idle, max_hours=setting.max_hours, created_at=created_at or time.time(),
        bucket=bucket, device_glob="~/dev/accel*", tpu_endpoint=gcp.tpu_v2.server.url,
        storage_endpoint=gcp.gcs.url, metadata_host=metadata.host, tick_seconds=TICK, warn_seconds=TICK,
    )


def start(worker: Worker0, config: AgentConfig) -> None:
    installed = install_agent(worker.runner, config)
    assert installed.started, installed.error


def node_gone(gcp: FakeGcp, node: str) -> Callable[[], bool]:
    return lambda: gcp.tpu.get_node(ZONE, node, "vm") is None


# ---------------------------------------------------------------------------------------------- the tests


def test_idle_tpu_is_deleted_with_the_vm_token_and_the_record_lands_in_the_bucket(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0) -> None:  # noqa: F811
    node = make_node(fake_gcp, worker0.cluster)
    bucket = f"tpuops-b-{uuid.uuid4().hex[:8]}"
    fake_gcp.storage().create_bucket(bucket)
    start(worker0, config_for(worker0, fake_gcp, metadata, node, idle="1s", bucket=bucket))

    wait_for("the idle TPU to be deleted", node_gone(fake_gcp, node))

    deletes = fake_gcp.tpu_v2.server.calls("DELETE", rf"/nodes/{node}$")
    assert len(deletes) == 1
    assert deletes[0].headers["authorization"] in {f"Bearer {t}" for t in metadata.tokens_issued}
    assert metadata.token_requests() and all(r.headers.get("metadata-flavor") == "Google"
                                             for r in metadata.token_requests())
    actions = wait_for("the final decision", lambda: "deleted" in worker0.actions() and worker0.actions())
    assert actions.index("warn") < actions.index("deleted")  # the warning comes first
    assert {"time", "reason", "idle_seconds", "action"} <= set(worker0.log()[-1])
    blob = fake_gcp.storage().bucket(bucket).blob(f".tpuops/{worker0.cluster}/autostop.json")
    record = json.loads(blob.download_as_bytes())
    assert record["reason"] == "idle" and record["node"] == node and record["idle_seconds"] >= 1.0
    report = worker0.report()
    assert report.state == "deleted" and not report.running
    assert fake_gcp.storage().bucket(bucket).exists()  # never the bucket


@pytest.mark.parametrize("holder", ["run", "device"])
def test_a_live_run_or_a_device_holder_keeps_the_tpu_until_it_ends(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0, holder: str,  # noqa: F811
        ) -> None:
    node = make_node(fake_gcp, worker0.cluster)
    if holder == "run":
        worker0.start_run("r1", "sleep 60")  # a long step with no output at all
    else:
        process = worker0.hold_device()
    start(worker0, config_for(worker0, fake_gcp, metadata, node, idle="1s"))

    # Well past the idle time measured in decisions: every one of them saw the TPU in use.
    wait_for("20 busy decisions", lambda: worker0.actions().count("busy") >= 20)
    assert fake_gcp.tpu.get_node(ZONE, node, "vm") is not None
    assert not fake_gcp.tpu_v2.server.calls("DELETE", r"/nodes/")
    busy = [e["reason"] for e in worker0.log() if e["action"] == "busy"]
    assert all(("run r1 alive" if holder == "run" else "holds") in reason for reason in busy)

    if holder == "run":
        worker0.stop_run("r1")
    else:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    wait_for("the TPU to be deleted once nothing uses it", node_gone(fake_gcp, node))


def test_max_hours_deletes_the_queued_resource_with_force_even_while_a_run_is_alive(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0) -> None:  # noqa: F811
    node = f"n-{uuid.uuid4().hex[:6]}"
    queued = f"q-{uuid.uuid4().hex[:6]}"
    spec = FakeNode(name=node, zone=ZONE, accelerator_type="v3-8", runtime="tpu-vm-tf-2.16.1-pjrt", mode="vm",
                    labels={"tpuops-cluster": worker0.cluster})
    fake_gcp.tpu.create_queued(FakeQueued(name=queued, zone=ZONE, node=spec))
    assert fake_gcp.tpu.get_queued(ZONE, queued).state == "ACTIVE"
    worker0.start_run("r1", "sleep 60")
    config = config_for(worker0, fake_gcp, metadata, node, idle="30m", max_hours=1.0,
                        created_at=time.time() - 3600, queued=queued)
    start(worker0, config)

    wait_for("the queued resource to be deleted", lambda: fake_gcp.tpu.get_queued(ZONE, queued) is None)
    deletes = fake_gcp.tpu_v2.server.calls("DELETE", rf"/queuedResources/{queued}$")
    assert [d.query.get("force") for d in deletes] == ["true"]
    assert fake_gcp.tpu.get_node(ZONE, node, "vm") is None
    assert (worker0.base / "runs" / "r1").is_dir()  # the run was alive all along
    last = wait_for("the deleted decision", lambda: [e for e in worker0.log() if e["action"] == "deleted"])
    assert last[0]["reason"].startswith("max_hours")


@pytest.mark.parametrize("labels", [{}, {"tpuops-cluster": "someone-else"}])
def test_a_node_without_the_clusters_label_is_never_deleted(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0, labels: dict[str, str]) -> None:  # noqa: F811
    node = make_node(fake_gcp, worker0.cluster, labels=labels)
    start(worker0, config_for(worker0, fake_gcp, metadata, node, idle="1s"))

    wait_for("the agent to refuse", lambda: worker0.report().state == "refused")
    assert not fake_gcp.tpu_v2.server.calls("DELETE", r"/nodes/")
    assert fake_gcp.tpu.get_node(ZONE, node, "vm") is not None
    assert fake_gcp.tpu_v2.server.calls("GET", rf"/nodes/{node}$")  # it did look
    wait_for("the agent to exit", lambda: not worker0.report().running)


def test_a_403_on_delete_is_retried_with_backoff_and_reported_with_the_role_to_grant(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0) -> None:  # noqa: F811
    node = make_node(fake_gcp, worker0.cluster)
    denied = "Permission 'tpu.nodes.delete' denied on resource"
    fake_gcp.tpu_v2.server.faults.http_error("DELETE", rf"/nodes/{node}$", 403, times=-1, message=denied)
    start(worker0, config_for(worker0, fake_gcp, metadata, node, idle="1s"))

    report = wait_for("two failed attempts in the status",
                      lambda: (r := worker0.report()).last_failure and r.last_failure.attempts >= 2 and r)
    failure = report.last_failure
    assert failure.status == 403 and denied in failure.message
    assert "roles/tpu.admin" in failure.hint and DEFAULT_EMAIL in failure.hint
    assert report.running and fake_gcp.tpu.get_node(ZONE, node, "vm") is not None
    times = [e["time"] for e in worker0.log() if e["action"] == "delete-failed"]
    assert len(times) >= 2

    fake_gcp.tpu_v2.server.faults.rules.clear()  # the role was granted
    wait_for("the retried delete to succeed", node_gone(fake_gcp, node))
    assert worker0.report().state == "deleted"


def test_the_keep_alive_file_stops_the_countdown_and_its_removal_restarts_it(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0) -> None:  # noqa: F811
    node = make_node(fake_gcp, worker0.cluster)
    worker0.base.mkdir(parents=True)
    keep_alive = worker0.base / "keep-alive"
    keep_alive.write_text("")
    start(worker0, config_for(worker0, fake_gcp, metadata, node, idle="1s"))

    wait_for("20 keep-alive decisions", lambda: worker0.actions().count("keep-alive") >= 20)
    assert fake_gcp.tpu.get_node(ZONE, node, "vm") is not None
    assert worker0.report().keep_alive

    keep_alive.unlink()
    wait_for("the TPU to be deleted after the keep-alive file went", node_gone(fake_gcp, node))
    actions = worker0.actions()
    assert "idle" in actions[actions.index("keep-alive"):]  # a full idle period after the cancel file went


def test_stop_with_keep_alive_ends_the_agent_and_a_new_setting_lifts_it(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0) -> None:  # noqa: F811
    node = make_node(fake_gcp, worker0.cluster)
    config = config_for(worker0, fake_gcp, metadata, node, idle="30m")
    start(worker0, config)
    stopped = stop_agent(worker0.runner, worker0.cluster, keep_alive=True)
    assert stopped.was_running and stopped.keep_alive and stopped.error is None
    report = worker0.report()
    assert not report.running and report.keep_alive and report.state == "stopped"

    refreshed = install_agent(worker0.runner, replace(config, idle_seconds=1.0))  # launch's refresh keeps it
    assert refreshed.started
    wait_for("keep-alive decisions", lambda: worker0.actions().count("keep-alive") >= 5)
    assert fake_gcp.tpu.get_node(ZONE, node, "vm") is not None

    lifted = install_agent(worker0.runner, replace(config, idle_seconds=1.0), clear_keep_alive=True)
    assert lifted.started and not (worker0.base / "keep-alive").exists()
    wait_for("the TPU to be deleted", node_gone(fake_gcp, node))


def test_the_agent_refuses_to_run_twice_and_a_refresh_replaces_it(
        fake_gcp: FakeGcp, metadata: MetadataFake, worker0: Worker0) -> None:  # noqa: F811
    node = make_node(fake_gcp, worker0.cluster)
    config = config_for(worker0, fake_gcp, metadata, node, idle="30m")
    first = install_agent(worker0.runner, config)
    second = install_agent(worker0.runner, config)
    assert first.started and second.started and first.pid != second.pid
    assert not Path(f"/proc/{first.pid}").exists() or b"agent.py" not in Path(f"/proc/{first.pid}/cmdline").read_bytes()

    agent = worker0.base / "autostop" / "agent.py"
    again = subprocess.run([sys.executable, str(agent), "run", str(worker0.base)], capture_output=True, text=True,
                           timeout=30, env={"HOME": str(worker0.home), "PATH": worker_path()})
    assert again.returncode == 3 and "already running" in again.stderr
    assert worker0.report().running


def test_a_worker_without_python3_is_named(tmp_path: Path) -> None:
    tools = tmp_path / "bin"  # a worker with coreutils but no python3
    tools.mkdir()
    for tool in ("sh", "timeout", "mkdir", "cat", "mv"):
        (tools / tool).symlink_to(shutil.which(tool))
    runner = LocalRunner("w0", tmp_path / "w0", {"PATH": str(tools)})
    config = AgentConfig(cluster="c", provider="gcp", project="p", zone=ZONE, node="n", queued=None,
                         idle_seconds=60.0, max_hours=None, created_at=time.time(), bucket=None,
                         device_glob="/dev/accel*")
    installed = install_agent(runner, config)
    assert not installed.started
    assert installed.error.startswith("w0: ") and "python3" in installed.error
