"""`tpuops logs --workers`: the current run's output on every worker (real sshd workers on loopback)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.context import Context
from tpuops.ops.launch import LaunchOptions, follow, launch_run

pytestmark = [
    pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd"),
    pytest.mark.usefixtures("tpu_paths_in_worker_homes"),
]

SPEC = """
name: {name}
zone: us-central2-b
tpu: {{type: v4-16}}
trainer:
  framework: jax
  command: echo default
"""


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd-logs"), 2) as cluster:
        yield cluster




def test_worker_output_snapshot_and_follow(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    sshd2.write_cluster(tpuops_home, "wlogs", write_spec(tmp_path, SPEC.format(name="wlogs")))
    command = "for i in 1 2 3; do echo step $i of worker $TPUOPS_WORKER_ID; done"
    ctx = Context.from_env()
    assert launch_run(ctx, "wlogs", LaunchOptions(command=command)).ok
    follow(ctx, "wlogs")  # wait for the run to end everywhere, so the snapshot below is complete

    snapshot = run_cli("logs", "wlogs", "--workers")
    assert snapshot.returncode == 0, snapshot.stderr
    lines = snapshot.stdout.splitlines()
    for worker in (0, 1):
        assert [line for line in lines if line.startswith(f"[w{worker}] ")] == [
            f"[w{worker}] step {i} of worker {worker}" for i in (1, 2, 3)
        ]

    followed = run_cli("logs", "wlogs", "--workers", "-f", timeout=120)
    assert followed.returncode == 0, followed.stderr
    assert sorted(followed.stdout.splitlines()) == sorted(lines)


def test_worker_output_without_a_run(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    sshd2.write_cluster(tpuops_home, "norun", write_spec(tmp_path, SPEC.format(name="norun")))
    result = run_cli("logs", "norun", "--workers")
    assert result.returncode != 0
    assert "no run recorded for 'norun'" in result.stderr and "tpuops launch norun" in result.stderr
