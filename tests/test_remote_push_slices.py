"""push to a Multislice cluster over real sshd workers on loopback: the payload leaves the client once, crosses
to each other slice once (that slice's first worker fetches it from the seed and serves its own slice), and every
fallback still ends with every worker holding the tree.

Who fetched from whom is read from the agent commands each worker was given: `Recording` runs every command on
the real SSH runner and keeps its argv.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.sshd import SshdCluster, sshd_available
from tests.test_remote_push import expected_files, make_tree, remote_files
from tpuops.access.cluster import cluster_access, make_runners
from tpuops.context import Context
from tpuops.remote.base import Runner, RunResult
from tpuops.remote.push_results import PushResult
from tpuops.remote.push_ship import agent_command
from tpuops.remote.sync import push_tree

pytestmark = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")

SLICE_OF = {"w0": 0, "w1": 0, "w2": 1, "w3": 1}
UNBINDABLE = "192.0.2.1"  # TEST-NET-1: not on this host, so a worker told to serve there cannot


@pytest.fixture(scope="module")
def sshd4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd4-slices"), 4) as cluster:
        yield cluster


class Recording:
    """A real runner that also keeps the argv of every command it ran."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.name = runner.name
        self.nearby = runner.nearby
        self.argvs: list[list[str]] = []

    def run(self, command: object, **kwargs: object) -> RunResult:
        assert isinstance(command, list)
        self.argvs.append(command)
        return self.runner.run(command, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        self.runner.close()

    def apply_options(self) -> list[str]:
        """The options of the `apply` this worker ran last (after DEST BASE NEW)."""
        start = len(agent_command())  # python3 and its options, the agent's source
        applies = [argv[start:] for argv in self.argvs if argv[start:start + 1] == ["apply"]]
        return applies[-1][4:]


def push_to_slices(sshd: SshdCluster, tpuops_home: Path, tmp_path: Path,
                   relay_hosts: dict[str, str]) -> tuple[PushResult, list[Recording], Path]:
    name = f"ms-{uuid.uuid4().hex[:6]}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: {name}\nzone: us-central2-b\ntpu: {{type: v4-16}}\n")
    sshd.write_cluster(tpuops_home, name, spec)
    src = tmp_path / "src"
    make_tree(src, files=40, size=16384)
    (src / "weights.bin").write_bytes(os.urandom(1 << 20))  # incompressible: the payload is over the threshold
    access = cluster_access(Context.from_env(), name)
    runners = [Recording(r) for r in make_runners(access, access.workers, connect_timeout=10)]
    try:
        result = push_tree(runners, src, f"~/tpuops/{name}/code", cache_dir=tmp_path / "cache",  # type: ignore[arg-type]
                           relay_hosts=relay_hosts, slice_of=SLICE_OF)
    finally:
        for runner in runners:
            runner.close()
    for worker in sshd.workers:
        assert remote_files(worker.home, f"tpuops/{name}/code") == expected_files(src, ())
    return result, runners, src


def hosts(sshd: SshdCluster) -> dict[str, str]:
    return {f"w{w.index}": w.host for w in sshd.workers}


def fetched_from(options: Sequence[str]) -> str | None:
    return options[options.index("--fetch") + 1].split("//")[1].rsplit(":", 1)[0] if "--fetch" in options else None


def test_the_payload_crosses_to_each_slice_once_and_each_slice_serves_itself(
        sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    result, runners, _ = push_to_slices(sshd4, tpuops_home, tmp_path, hosts(sshd4))
    by_name = {r.name: r for r in runners}
    host = hosts(sshd4)

    assert [(w.worker, w.status) for w in result.workers] == [
        ("w0", "sent"), ("w1", "relayed"), ("w2", "relayed"), ("w3", "relayed")]
    assert result.payload_bytes > 1 << 20 and result.payload_bytes <= result.bytes_sent < result.payload_bytes + 1024
    seed, head = by_name["w0"].apply_options(), by_name["w2"].apply_options()
    assert "--fetch" not in seed and seed[seed.index("--serve") + 1] == host["w0"]
    # Slice 1's first worker fetched from the seed and served its slice; its slice-mate fetched from it.
    assert fetched_from(head) == host["w0"] and head[head.index("--serve") + 1] == host["w2"]
    assert fetched_from(by_name["w3"].apply_options()) == host["w2"]
    assert fetched_from(by_name["w1"].apply_options()) == host["w0"]


def test_a_slice_head_that_cannot_serve_leaves_its_slice_to_the_seed(
        sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    result, runners, _ = push_to_slices(sshd4, tpuops_home, tmp_path, {**hosts(sshd4), "w2": UNBINDABLE})
    by_name = {r.name: r for r in runners}

    assert [w.status for w in result.workers] == ["sent", "relayed", "relayed", "relayed"]
    assert result.bytes_sent < result.payload_bytes + 1024  # still sent once
    assert fetched_from(by_name["w3"].apply_options()) == hosts(sshd4)["w0"]


def test_a_seed_that_cannot_serve_means_direct_copies_for_every_slice(
        sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    result, _, _ = push_to_slices(sshd4, tpuops_home, tmp_path, {**hosts(sshd4), "w0": UNBINDABLE})

    assert [w.status for w in result.workers] == ["sent"] * 4
    assert result.bytes_sent >= 4 * result.payload_bytes
