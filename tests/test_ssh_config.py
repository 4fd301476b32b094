"""`tpuops ssh-config`: the system OpenSSH reaches real sshd workers on loopback as `tpuops-NAME-wN`, with the
cluster's key and its pinned host keys (a key not pinned, or not the pinned one, is refused)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.access import ssh_config
from tpuops.state import ClusterState, WorkerRecord

SPEC = """
name: {name}
zone: europe-west4-a
tpu:
  type: v3-32
code:
  path: ./src
"""
pytestmark = pytest.mark.skipif(not sshd_available() or shutil.which("ssh") is None,
                                reason="needs root, OpenSSH sshd and ssh")


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd-config"), 2) as cluster:
        yield cluster


def system_ssh(config: Path, alias: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", alias,
                           *command], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_system_ssh_reaches_every_worker_by_its_alias(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    sshd2.write_cluster(tpuops_home, "demo", write_spec(tmp_path, SPEC.format(name="demo")), pin=True)
    written = run_cli("ssh-config", "demo")
    assert written.returncode == 0, written.stderr
    include = written.stdout.strip().splitlines()[-1]
    assert include == f"Include {tpuops_home}/ssh/*.conf"
    assert "tpuops-demo-w0" in written.stdout and "not pinned" not in written.stdout

    user_config = tmp_path / "config"  # what ~/.ssh/config would be, with the line at its top
    user_config.write_text(include + "\n\nHost *\n    LogLevel ERROR\n")
    for index in (0, 1):
        done = system_ssh(user_config, f"tpuops-demo-w{index}", "echo", "ok")
        assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr

    # A worker whose host key is no longer the pinned one: ssh itself refuses it.
    sshd2.new_host_key(1)
    refused = system_ssh(user_config, "tpuops-demo-w1", "echo", "ok")
    assert refused.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in refused.stderr


def test_unpinned_workers_are_named_and_refused(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    sshd2.write_cluster(tpuops_home, "fresh", write_spec(tmp_path, SPEC.format(name="fresh")), pin=False)
    written = run_cli("ssh-config", "--json")
    assert written.returncode == 0, written.stderr
    report = json.loads(written.stdout)
    assert [(h["alias"], h["pinned"]) for h in report["hosts"]] == [("tpuops-fresh-w0", False),
                                                                    ("tpuops-fresh-w1", False)]
    user_config = tmp_path / "config"
    user_config.write_text(report["include"] + "\n")
    refused = system_ssh(user_config, "tpuops-fresh-w0", "true")
    assert refused.returncode == 255 and "Host key verification failed" in refused.stderr

    pinned = run_cli("exec", "fresh", "--", "true")  # tpuops pins on first use; then ssh accepts the worker
    assert pinned.returncode == 0, pinned.stderr
    assert system_ssh(user_config, "tpuops-fresh-w0", "echo", "ok").stdout == "ok\n"


def test_local_workers_get_no_block_and_naming_one_is_a_usage_error(tpuops_home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: sim
        provider: local
        tpu: {type: v2-8, workers: 1}
        code: {path: ./src}
    """)
    (tmp_path / "src").mkdir()
    assert run_cli("up", str(spec)).returncode == 0
    try:
        assert not (tpuops_home / "ssh" / "sim.conf").exists()
        named = run_cli("ssh-config", "sim")
        assert named.returncode == 2 and "the local provider's workers are directories" in named.stderr
        every = run_cli("ssh-config")
        assert every.returncode == 0 and "skipped sim" in every.stderr
    finally:
        assert run_cli("down", "sim", "--yes").returncode == 0


def test_refresh_follows_the_state_and_quotes_paths(tmp_path: Path) -> None:
    home = tmp_path / "my home"
    state = ClusterState(name="c", provider="gcp", spec_path="x", ssh_user="u", workers=[
        WorkerRecord(index=0, internal_ip="10.0.0.2", ssh_host="203.0.113.5", ssh_port=22)])
    path = ssh_config.refresh(home, state)
    assert path is not None
    text = path.read_text()
    assert f'IdentityFile "{home}/clusters/c/id_ed25519"' in text and "StrictHostKeyChecking yes" in text
    assert ssh_config.include_line(home) == f'Include "{home}/ssh/*.conf"'
    state.workers = []  # down kept the bucket: no workers, no block
    assert ssh_config.refresh(home, state) is None and not path.exists()
