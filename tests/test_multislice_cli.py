"""Multislice end to end through the CLI: two v4-16 slices (2 x 2 hosts) made by one queued resource, their
hosts four real sshd workers on loopback behind the TPU v2 wire fake.

The fake names the nodes NAME-0 and NAME-1 (Google's naming from the prefix); node NAME-K's host I is sshd
worker 2K+I, with that worker's real host key. Every sshd session's environment already holds MEGASCALE_PORT
(as a TPU runtime could provide it), which must win over the port tpuops would set; the hosts' metadata server
(a fake, through GCE_METADATA_HOST) serves a `tpu-env` whose MEGASCALE_* values tpuops must not override.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.metadata import MetadataFake
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli
from tests.sshd import SshdCluster, sshd_available, tpus_answer_at
from tests.test_autostop_agent import wait_for as wait_until
from tests.test_watch import ZONE, attempts, finish, make_cluster, start_cli, state_of, stop_leftovers, wait_for
from tpuops.remote.local import LocalRunner
from tpuops.shipped import script_command

HOSTS_PER_SLICE = 2
HOST_MEGASCALE_PORT = "9431"
# What Google's runtime writes into a Multislice host's tpu-env (a part of it): JAX reads these when unset.
TPU_ENV = "ACCELERATOR_TYPE: 'v4-16'\nMEGASCALE_NUM_SLICES: '2'\nWORKER_ID: '0'\n"

pytestmark = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")


@pytest.fixture(scope="module")
def metadata() -> Iterator[MetadataFake]:
    fake = MetadataFake().start()
    fake.attributes["tpu-env"] = TPU_ENV
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def sshd4(tmp_path_factory: pytest.TempPathFactory, metadata: MetadataFake) -> Iterator[SshdCluster]:
    cluster = SshdCluster(tmp_path_factory.mktemp("sshd-multislice"), 4,
                          env={"MEGASCALE_PORT": HOST_MEGASCALE_PORT, "GCE_METADATA_HOST": metadata.host})
    with cluster:
        yield cluster


def worker_of(sshd: SshdCluster, name: str, index: int) -> int:
    """Node NAME-K's host I: sshd worker 2K+I."""
    return HOSTS_PER_SLICE * int(name.rsplit("-", 1)[1]) + index


@pytest.fixture
def gcp(fake_gcp: FakeGcp, sshd4: SshdCluster, tpu_paths_in_worker_homes: None) -> FakeGcp:  # noqa: F811
    return tpus_answer_at(fake_gcp, lambda name, index: sshd4.workers[worker_of(sshd4, name, index)])


def two_slice_spec(sshd: SshdCluster, home: Path, tmp_path: Path, command: str) -> tuple[str, Path]:
    name, spec = make_cluster(sshd, home, tmp_path, command)
    text = spec.read_text().replace("preemptible: true}", "preemptible: true, slices: 2}")
    assert "slices: 2" in text
    spec.write_text(text)
    code = tmp_path / "code"
    code.mkdir()
    (code / "weights.bin").write_bytes(os.urandom(1 << 20))  # 1 MiB, incompressible: above the relay threshold
    spec.write_text(text + "code: {path: code}\n")
    return name, spec


def cli_json(gcp: FakeGcp, *args: str) -> dict:
    at = args.index("--") if "--" in args else len(args)  # options before the remote command
    result = run_cli(*args[:at], "--json", *args[at:], env=gcp.env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_two_slices_come_up_and_every_command_reaches_all_four_hosts(
        gcp: FakeGcp, sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    marker = f"tpuops-ms-{uuid.uuid4().hex[:8]}"
    command = (f"echo hello from slice $TPUOPS_SLICE_ID; env | grep -E '^(TPUOPS|MEGASCALE)_' | sort "
               f"> ~/env-$TPUOPS_CLUSTER; sleep 300 # {marker}")
    name, spec = two_slice_spec(sshd4, tpuops_home, tmp_path, command)

    plan = run_cli("plan", str(spec), env=gcp.env, timeout=60)
    assert plan.returncode == 0 and "2 slices" in plan.stdout and "4 hosts, 16 chips in all" in plan.stdout
    up = run_cli("up", str(spec), env=gcp.env, timeout=120)
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        # One queued resource carrying multislice_params; Google's node names; workers numbered across slices.
        [created] = gcp.tpu_v2.server.calls("POST", r"/queuedResources$")
        [node_spec] = created.body["tpu"]["nodeSpec"]
        assert node_spec["multisliceParams"] == {"nodeCount": 2, "nodeIdPrefix": name}
        state = state_of(tpuops_home, name)
        assert [(w["index"], w["slice"], w["slice_index"], w["ssh_host"]) for w in state["workers"]] == [
            (i, i // 2, i % 2, sshd4.workers[i].host) for i in range(4)]
        [record] = state["resources"]
        assert record["kind"] == "queued_resource" and record["nodes"] == [f"{name}-0", f"{name}-1"]
        pinned = (tpuops_home / "clusters" / name / "known_hosts").read_text().splitlines()
        assert sorted(pinned) == sorted(w.host_key_line() for w in sshd4.workers)

        # exec reaches the four hosts under slice-qualified names; each name is the host it says.
        every = cli_json(gcp, "exec", name, "--", "echo $SSH_CONNECTION")
        assert [w["worker"] for w in every["workers"]] == ["s0w0", "s0w1", "s1w0", "s1w1"]
        for index, worker in enumerate(every["workers"]):
            assert worker["stdout"].split()[2] == sshd4.workers[index].host
        assert [w["worker"] for w in cli_json(gcp, "exec", name, "--slice", "1", "--", "true")["workers"]] == \
            ["s1w0", "s1w1"]
        assert [w["worker"] for w in cli_json(gcp, "exec", name, "--worker", "s1w1,0", "--", "true")["workers"]] == \
            ["s0w0", "s1w1"]
        wrong = run_cli("exec", name, "--worker", "s2w0", "--", "true", env=gcp.env, timeout=60)
        assert wrong.returncode == 2 and "no slice 2" in wrong.stderr and "slices 0-1" in wrong.stderr
        ssh = run_cli("ssh", name, "--slice", "1", "--print", env=gcp.env, timeout=60)
        assert ssh.returncode == 0 and ssh.stdout.split()[-1] == sshd4.workers[2].host

        status = run_cli("status", name, env=gcp.env, timeout=60)
        assert status.returncode == 0 and f"{name}-0: READY, {name}-1: READY" in status.stdout
        assert "worker 3 (s1w1)" in status.stdout

        # launch: the payload leaves the client once; each trainer knows its slice and the coordinator.
        launch = cli_json(gcp, "launch", name)
        [push] = [step for step in launch["steps"] if step["name"] == "push"]
        sent = sum(w["bytes_sent"] for w in push["workers"])
        assert 1 << 20 <= sent < 2 << 20, push
        envs = wait_for_envs(sshd4, name)
        coordinator = sshd4.workers[0].host
        for index, env in enumerate(envs):
            assert env["TPUOPS_WORKER_ID"] == str(index) and env["TPUOPS_NUM_WORKERS"] == "4"
            assert env["TPUOPS_SLICE_ID"] == str(index // 2) and env["TPUOPS_NUM_SLICES"] == "2"
            assert env["TPUOPS_SLICE_WORKER_ID"] == str(index % 2) and env["TPUOPS_SLICE_NUM_WORKERS"] == "2"
            assert env["TPUOPS_COORDINATOR"].startswith(coordinator + ":")
            assert env["MEGASCALE_COORDINATOR_ADDRESS"] == coordinator
            assert env["MEGASCALE_SLICE_ID"] == str(index // 2)
            assert "MEGASCALE_NUM_SLICES" not in env  # tpu-env has it: JAX reads Google's value
            assert env["MEGASCALE_PORT"] == HOST_MEGASCALE_PORT  # the host's own setting wins over 8081

        logs = run_cli("logs", name, "--workers", env=gcp.env, timeout=60)
        assert logs.returncode == 0, logs.stderr[-3000:]
        for worker in ("s0w0", "s0w1", "s1w0", "s1w1"):
            assert f"[{worker}] hello from slice {worker[1]}" in logs.stdout
        stop = cli_json(gcp, "stop", name)
        assert stop["ok"] and sorted(stop["workers"]) == ["s0w0", "s0w1", "s1w0", "s1w1"]
        assert set(stop["workers"].values()) != {"running"}
    finally:
        stop_leftovers(gcp, name, marker)

    down = run_cli("down", name, "--yes", env=gcp.env, timeout=120)
    assert down.returncode == 0, down.stderr[-3000:]
    assert len(gcp.tpu_v2.server.calls("DELETE", rf"/queuedResources/{name}-qr")) == 1
    assert not [key for key in gcp.tpu.nodes if key[1].startswith(f"{name}-")]
    assert not gcp.tpu.queued


def wait_for_envs(sshd: SshdCluster, name: str) -> list[dict[str, str]]:
    paths = [w.home / f"env-{name}" for w in sshd.workers]
    wait_until("every trainer's env", lambda: all(p.exists() and p.read_text().endswith("\n") for p in paths))
    return [dict(line.split("=", 1) for line in p.read_text().splitlines()) for p in paths]


@pytest.mark.parametrize(("suspended_at_once", "reason"), [
    (True, "queued resource SUSPENDED: recovering"),
    (False, "-1 PREEMPTED (Multislice cannot go on with a slice missing): recovering"),  # still ACTIVE
])
def test_watch_recreates_the_whole_request_when_one_slice_is_preempted(
        gcp: FakeGcp, sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path, suspended_at_once: bool,
        reason: str) -> None:
    gcp.tpu.suspend_on_lost_slice = suspended_at_once
    marker = f"tpuops-ms-watch-{uuid.uuid4().hex[:8]}"
    command = (f'echo "restart=${{TPUOPS_RESTART:-0}} slice=$TPUOPS_SLICE_ID" >> ~/attempts-$TPUOPS_CLUSTER; '
               f'[ "${{TPUOPS_RESTART:-0}}" -ge 1 ] || sleep 300 # {marker}')
    name, spec = two_slice_spec(sshd4, tpuops_home, tmp_path, command)
    process = start_cli(gcp, "run", str(spec), "--watch")
    try:
        wait_for(lambda: all(len(lines) == 1 for lines in attempts(sshd4, name)), "the first start", process)
        gcp.tpu.preempt(ZONE, f"{name}-1")  # one slice lost: the whole request is SUSPENDED
        code, stdout, stderr = finish(process)
    finally:
        stop_leftovers(gcp, name, marker)
    assert code == 0, stderr[-3000:]
    assert reason in stderr
    # The whole queued resource deleted (force) and created again: Multislice cannot go on with a slice missing.
    assert len(gcp.tpu_v2.server.calls("DELETE", rf"/queuedResources/{name}-qr")) == 1
    assert len(gcp.tpu_v2.server.calls("POST", r"/queuedResources$")) == 2
    assert all(gcp.tpu.nodes[(ZONE, f"{name}-{k}")].state == "READY" for k in range(2))
    assert attempts(sshd4, name) == [["restart=0 slice=0", "restart=1 slice=0"]] * 2 + \
        [["restart=0 slice=1", "restart=1 slice=1"]] * 2
    run_cli("down", name, "--yes", env=gcp.env, timeout=120)


@pytest.mark.parametrize(("tpu_env", "exported"), [
    (None, {"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.2", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1",
            "MEGASCALE_PORT": "8081"}),
    ("MEGASCALE_COORDINATOR_ADDRESS: '10.9.9.9'\nMEGASCALE_NUM_SLICES: '2'\nMEGASCALE_SLICE_ID: '1'\n"
     "MEGASCALE_PORT: '8080'\n", {}),
    ("TPU_ACCELERATOR_TYPE: 'v4-16'\nMEGASCALE_SLICE_ID: '1'\n",
     {"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.2", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_PORT": "8081"}),
    ("unreachable", {"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.2", "MEGASCALE_NUM_SLICES": "2",
                     "MEGASCALE_SLICE_ID": "1", "MEGASCALE_PORT": "8081"}),
], ids=["no-tpu-env", "full-tpu-env", "partial-tpu-env", "metadata-unreachable"])
def test_a_host_exports_only_what_its_tpu_env_lacks(tmp_path: Path, tpu_env: str | None,
                                                   exported: dict[str, str], refused_port: int) -> None:
    """start.sh on one host: the tpu-env metadata first, then tpuops's defaults (port 8081) for what it lacks."""
    fake = MetadataFake().start()
    try:
        if tpu_env not in (None, "unreachable"):
            fake.attributes["tpu-env"] = tpu_env
        host = f"127.0.0.1:{refused_port}" if tpu_env == "unreachable" else fake.host
        assert megascale_exported(tmp_path, host) == exported
        if tpu_env != "unreachable":
            [request] = [r for r in fake.requests if r.path.endswith("/attributes/tpu-env")]
            assert request.headers["metadata-flavor"] == "Google"
    finally:
        fake.stop()


@pytest.mark.parametrize(("tpu_env", "host_env", "user_env", "port"), [
    ("MEGASCALE_COORDINATOR_ADDRESS: '10.9.9.9:8476'\nMEGASCALE_NUM_SLICES: '2'\nMEGASCALE_SLICE_ID: '1'\n", {}, {},
     "8476"),
    ("TPU_ACCELERATOR_TYPE: 'v4-16'\n", {"MEGASCALE_COORDINATOR_ADDRESS": "10.9.9.9:8476"}, {}, "8476"),
    ("TPU_ACCELERATOR_TYPE: 'v4-16'\n", {}, {"MEGASCALE_COORDINATOR_ADDRESS": "10.9.9.9:8476"}, "8476"),
    ("MEGASCALE_COORDINATOR_ADDRESS: '[fd00::9]:8476'\n", {}, {}, "8476"),
    ("MEGASCALE_COORDINATOR_ADDRESS: 'fd00::9'\n", {}, {}, "8081"),  # no port: the default
    ("MEGASCALE_COORDINATOR_ADDRESS: '10.9.9.9'\n", {}, {}, "8081"),
], ids=["tpu-env", "host-environment", "trainer-env", "ipv6-with-port", "ipv6-bare", "no-port"])
def test_a_coordinator_given_with_its_port_sets_the_port(tmp_path: Path, tpu_env: str, host_env: dict[str, str],
                                                        user_env: dict[str, str], port: str) -> None:
    """Google's tpu-env (or the host, or trainer.env) names the coordinator with its port and no MEGASCALE_PORT:
    the slices meet on that port, not on 8081 beside it."""
    with MetadataFake() as fake:
        fake.attributes["tpu-env"] = tpu_env
        exported = megascale_exported(tmp_path, fake.host, host_env, user_env)
    assert exported["MEGASCALE_PORT"] == port, exported


def megascale_exported(tmp_path: Path, metadata_host: str, host_env: dict[str, str] | None = None,
                       user_env: dict[str, str] | None = None) -> dict[str, str]:
    """The MEGASCALE_* variables a trainer sees when start.sh starts it on slice 1's first host (of 2 x 2)."""
    from tpuops.ops.trainer_env import slice_env
    from tpuops.state import WorkerRecord

    runner = LocalRunner("s1w0", tmp_path, {"PATH": os.environ["PATH"], "GCE_METADATA_HOST": metadata_host,
                                            **(host_env or {})})
    workers = [WorkerRecord(index=i, internal_ip=f"10.0.0.{2 + i}", ssh_host="h", slice=i // 2) for i in range(4)]
    env = {**(user_env or {}), **slice_env(workers[2], workers, user_env or {})}  # as trainer_envs puts them
    result = runner.run(script_command("start", "ms", "run1", "env | grep ^MEGASCALE_ | sort"), env=env, timeout=30)
    assert result.ok, result
    exit_code = tmp_path / "tpuops" / "ms" / "runs" / "run1" / "exit_code"
    wait_until("the trainer's exit", exit_code.exists)
    output = (tmp_path / "tpuops" / "ms" / "runs" / "run1" / "output.log").read_text()
    return dict(line.split("=", 1) for line in output.split())
