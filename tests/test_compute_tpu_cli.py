"""tpu.api: compute end to end through the CLI, the hosts real sshd workers on loopback behind the Compute fake.

A TPU7x-16 slice (two hosts of tpu7x-standard-4t: workload policy, instance template, managed instance group) goes
up -> launch -> a Spot host preempted -> `watch` deletes and re-creates the whole slice and resumes -> down; a v6e-8
is one Compute Engine VM (up, launch, down by label without local state). The fake names a group's VMs at random
and gives them ranks in another order: the host of rank R is sshd worker R, with that worker's real host key, so
worker R's address and pinned key are right only if tpuops ordered the hosts by `agent-worker-number`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tests.test_autostop_agent import wait_for as wait_until
from tests.test_watch import FAST, finish, start_cli, state_of, stop_leftovers, wait_for

pytestmark = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")
ZONE = "us-central1-c"
V6E_ZONE = "us-east1-d"
# What the trainer's environment must not carry on these images: JAX finds its ranks from the metadata server,
# and TPU_* or JAX coordinator variables would override it.
OVERRIDES = ("TPU_", "JAX_COORDINATOR", "JAX_PROCESS", "JAX_NUM_PROCESSES", "CLOUD_TPU_TASK_ID")


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd-compute-tpu"), 2) as cluster:
        yield cluster


def rank_of(gcp: FakeGcp, instance: str) -> int:
    [found] = [i for (_, name), i in gcp.compute.instances.items() if name == instance]
    return int(found.metadata.get("agent-worker-number", "0"))


@pytest.fixture
def gcp(fake_gcp: FakeGcp, sshd2: SshdCluster, tpu_paths_in_worker_homes: None) -> FakeGcp:  # noqa: F811
    """A group's VM of rank R answers at sshd worker R's address with its host key (a single VM is worker 0)."""
    # A group's VM is ct-XXXXXXXX-SUFX and its number is its rank; a single VM is named after the cluster.
    fake_gcp.compute.external_ip = lambda name, rank: sshd2.workers[rank if name.count("-") > 1 else 0].host
    fake_gcp.compute.host_keys = lambda name: [
        sshd2.workers[rank_of(fake_gcp, name)].published_key()]
    return fake_gcp


def make_spec(sshd: SshdCluster, home: Path, tmp_path: Path, tpu: str, zone: str, framework: str,
              command: str, bucket: bool = False) -> tuple[str, Path]:
    name = f"ct-{uuid.uuid4().hex[:8]}"
    bucket_line = f"bucket: {{name: {name}-b}}" if bucket else ""  # where a guard keeps its lease and ledger
    spec = write_spec(tmp_path, f"""
        name: {name}
        zone: {zone}
        tpu: {tpu}
        {bucket_line}
        ssh: {{user: root, port: {sshd.port}}}
        trainer:
          framework: {framework}
          command: {json.dumps(command)}
        """)
    cluster_dir = home / "clusters" / name
    cluster_dir.mkdir(parents=True)
    shutil.copy(sshd.client_key, cluster_dir / "id_ed25519")  # the key the sshd workers authorise
    shutil.copy(sshd.client_key.with_suffix(".pub"), cluster_dir / "id_ed25519.pub")
    (cluster_dir / "id_ed25519").chmod(0o600)
    return name, spec


def trainer(marker: str) -> str:
    """Records each start and its environment; trains "forever" until the first restart, which succeeds."""
    return ('echo "restart=${TPUOPS_RESTART:-0} rank=$TPUOPS_WORKER_ID" >> ~/attempts-$TPUOPS_CLUSTER; '
            'env | sort > ~/env-$TPUOPS_CLUSTER; '
            f'[ "${{TPUOPS_RESTART:-0}}" -ge 1 ] || sleep 300 # {marker}')


def lines(sshd: SshdCluster, name: str, what: str) -> list[list[str]]:
    paths = [w.home / f"{what}-{name}" for w in sshd.workers]
    return [path.read_text().splitlines() if path.exists() else [] for path in paths]


def cli(gcp: FakeGcp, *args: str) -> str:
    result = run_cli(*args, env=gcp.env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def nothing_left(gcp: FakeGcp) -> bool:
    tpus = gcp.compute_tpus
    assert tpus is not None
    return not (gcp.compute.instances or tpus.groups or tpus.templates or tpus.policies)


@pytest.mark.parametrize("guard", [False, True], ids=["watch", "guard"])
def test_tpu7x_slice_up_launch_preempted_recreated_resumed_down(
        gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path, guard: bool) -> None:
    """`watch` on the laptop, or the guard (`watch --headless`: the loop a guard host runs, lease and ledger in
    the bucket), recovers the slice the same way."""
    marker = f"tpuops-ct-{uuid.uuid4().hex[:8]}"
    name, spec = make_spec(sshd2, tpuops_home, tmp_path, "{type: tpu7x-16, spot: true}", ZONE, "jax",
                           trainer(marker), bucket=guard)
    tpus = gcp.compute_tpus
    assert tpus is not None
    try:
        cli(gcp, "up", str(spec))
        [group] = tpus.groups.values()
        assert group.name == name and group.body["targetSizePolicy"]["mode"] == "BULK"
        assert set(tpus.templates) == {f"{name}-it"} and [p.name for p in tpus.policies.values()] == [f"{name}-wp"]
        state = state_of(tpuops_home, name)
        [record] = [r for r in state["resources"] if r["kind"] == "compute_tpu"]  # (and the guard's bucket)
        assert (record["kind"], record["name"], record["zone"], record["status"]) == ("compute_tpu", name, ZONE,
                                                                                       "created")
        assert record["parts"] == [f"workload policy {name}-wp", f"instance template {name}-it"]
        # Worker R is the host whose agent-worker-number is R (the fake's names say nothing of it), key pinned.
        assert [(w["index"], w["ssh_host"]) for w in state["workers"]] == [(i, sshd2.workers[i].host) for i in (0, 1)]
        pinned = (tpuops_home / "clusters" / name / "known_hosts").read_text().splitlines()
        assert sorted(pinned) == sorted(w.host_key_line() for w in sshd2.workers)
        every = json.loads(cli(gcp, "exec", name, "--json", "--", "echo $SSH_CONNECTION"))
        assert [w["stdout"].split()[2] for w in every["workers"]] == [w.host for w in sshd2.workers]
        shown = cli(gcp, "status", name)
        assert "compute_tpu" in shown and "READY" in shown and "topology ACTIVE" in shown

        cli(gcp, "launch", name)
        log = tmp_path / "guard.log"  # a headless guard's log lines (its stdout), read while it runs
        watcher = subprocess.Popen([sys.executable, "-m", "tpuops", "watch", name, "--headless"],
                                   env={**os.environ, **gcp.env, **FAST}, stdout=log.open("w"),
                                   stderr=subprocess.PIPE, text=True) if guard else start_cli(gcp, "watch", name)
        try:
            wait_for(lambda: all(len(a) == 1 for a in lines(sshd2, name, "attempts")), "the first start", watcher)
            env = lines(sshd2, name, "env")
            assert all(not line.startswith(OVERRIDES) for worker in env for line in worker), env
            assert "TPUOPS_NUM_WORKERS=2" in env[1] and "TPUOPS_WORKER_ID=1" in env[1]
            [host_of_rank_1] = [n for n in group.instances if rank_of(gcp, n) == 1]
            tpus.preempt(ZONE, host_of_rank_1)  # a Spot VM reclaimed: it reads TERMINATED
            if guard:  # a guard outlives its run (it waits for the next launch): stopped once its log says it ended
                wait_for(lambda: "watch ended: every worker exited 0" in log.read_text(), "the recovered run's end",
                         watcher)
                watcher.terminate()
            code, stdout, stderr = finish(watcher)
            stdout = log.read_text() if guard else stdout
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.communicate(timeout=10)
        assert code == (143 if guard else 0), stderr[-3000:]  # a guard: stopped by SIGTERM (as systemd does)
        told = stdout + stderr  # a headless guard writes its log lines to stdout (its log file, the journal)
        assert "TPU PREEMPTED: recovering" in told and "watch ended: every worker exited 0" in told
        # The whole slice deleted and made again (a new group of new VMs), the run resumed on both ranks.
        assert len(gcp.compute_api.server.calls("POST", r"/instanceGroupManagers$")) == 2
        [again] = tpus.groups.values()
        assert again is not group and not set(again.instances) & set(group.instances)
        assert lines(sshd2, name, "attempts") == [[f"restart={r} rank={w}" for r in (0, 1)] for w in (0, 1)]
        state = state_of(tpuops_home, name)
        assert [(w["index"], w["ssh_host"]) for w in state["workers"]] == [(i, sshd2.workers[i].host) for i in (0, 1)]

        down = cli(gcp, "down", name, "--yes")
        assert f"deleted compute_tpu {name}" in down
        assert nothing_left(gcp)
    finally:
        stop_leftovers(gcp, name, marker)


def test_v6e_as_one_compute_engine_vm_up_launch_down_without_state(
        gcp: FakeGcp, sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name, spec = make_spec(sshd2, tpuops_home, tmp_path, "{type: v6e-8, api: compute}", V6E_ZONE, "pytorch",
                           "env | sort > ~/env-$TPUOPS_CLUSTER")
    cli(gcp, "up", str(spec))
    [instance] = [i for (_, n), i in gcp.compute.instances.items() if n == name]
    assert instance.machine_type.endswith("ct6e-standard-8t") and instance.metadata["agent-worker-number"] == "0"
    state = state_of(tpuops_home, name)
    assert [r["kind"] for r in state["resources"]] == ["compute_tpu"] and state["resources"][0]["parts"] == []
    assert [w["ssh_host"] for w in state["workers"]] == [sshd2.workers[0].host]

    cli(gcp, "launch", name)
    wait_until("the trainer's environment", lambda: lines(sshd2, name, "env")[0])
    env = lines(sshd2, name, "env")[0]
    assert "PJRT_DEVICE=TPU" in env and not any(line.startswith(OVERRIDES) for line in env)

    shutil.rmtree(tpuops_home / "clusters" / name)  # no local state: found by its label in every zone
    down = cli(gcp, "down", name, "--yes")
    assert f"compute_tpu {name}" in down and nothing_left(gcp)
