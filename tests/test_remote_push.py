"""push over real sshd workers on loopback: incremental by hash, sent once, deletions, interruptions."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.access.cluster import cluster_access, make_runners
from tpuops.context import Context
from tpuops.ops.push import push
from tpuops.ops.remote import ssh_argv
from tpuops.remote.local import LocalRunner
from tpuops.remote.manifest import Manifest, scan_tree
from tpuops.remote.payload import Payload
from tpuops.remote.push_ship import agent_command
from tpuops.remote.sync import push_tree

pytestmark = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")

SPEC = """
name: {name}
zone: europe-west4-a
tpu:
  type: v3-32
code:
  path: ./src
  exclude: ["*.log", "outputs/"]
data:
  - from: ./dataset
    to: ~/data/ds
"""
CODE = "tpuops/demo/code"


@pytest.fixture(scope="module")
def sshd4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd4"), 4) as cluster:
        yield cluster


def make_tree(root: Path, files: int = 120, size: int = 4096) -> None:
    for i in range(files):
        path = root / f"pkg{i % 6}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))  # incompressible, so the payload stays above the relay threshold
    (root / "train.sh").write_text("#!/bin/sh\necho training\n")
    (root / "train.sh").chmod(0o755)
    os.symlink("train.sh", root / "run.sh")
    (root / "debug.log").write_text("excluded by code.exclude")
    (root / "outputs").mkdir()
    (root / "outputs" / "ckpt").write_text("excluded directory")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("always excluded")
    (root / "secrets").mkdir()
    (root / "secrets" / "token").write_text("excluded by .tpuopsignore")
    (root / ".tpuopsignore").write_text("secrets/\n")


def setup_cluster(sshd: SshdCluster, tpuops_home: Path, tmp_path: Path) -> tuple[str, Path]:
    src = tmp_path / "src"
    make_tree(src)
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "train.txt").write_text("a b c\n")
    spec = write_spec(tmp_path, SPEC.format(name="demo"))
    sshd.write_cluster(tpuops_home, "demo", spec)
    return "demo", src


def remote_files(home: Path, rel: str) -> dict[str, bytes]:
    root = home / rel
    found = {}
    for directory, _, files in os.walk(root, followlinks=True):
        for name in files:
            path = Path(directory, name)
            found[str(path.relative_to(root))] = b"->" + os.readlink(path).encode() if path.is_symlink() \
                else path.read_bytes()
    return found


def visible_trees(home: Path) -> list[str]:
    return sorted(n for n in os.listdir(home / "tpuops/demo/.tpuops-trees/code") if n != ".lock")


def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def expected_files(src: Path, exclude: tuple[str, ...] = ("*.log", "outputs/")) -> dict[str, bytes]:
    entries = scan_tree(src, exclude).entries
    return {e.path: (b"->" + e.link.encode()) if e.link else (src / e.path).read_bytes() for e in entries}


def test_push_sends_once_then_nothing_then_only_the_change(
    sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path
) -> None:
    name, src = setup_cluster(sshd4, tpuops_home, tmp_path)
    first = push(Context.from_env(), name)
    assert first.ok, first.as_dict()
    code, data = first.trees
    # Relay: worker 0 received the payload, the others fetched it from worker 0; the client sent it once.
    assert [w.status for w in code.workers] == ["sent", "relayed", "relayed", "relayed"]
    assert code.payload_bytes > 256 * 1024
    assert code.payload_bytes <= code.bytes_sent < code.payload_bytes + 1024
    want = expected_files(src)
    assert "debug.log" not in want and "secrets/token" not in want and ".git/HEAD" not in want
    for worker in sshd4.workers:
        assert remote_files(worker.home, CODE) == want
        assert os.access(worker.home / CODE / "train.sh", os.X_OK)
        assert (worker.home / "data/ds/train.txt").read_text() == "a b c\n"
    assert [w.status for w in data.workers] == ["sent"] * 4  # small: direct copies beat starting a relay

    again = push(Context.from_env(), name)
    assert again.ok and all(w.status == "unchanged" for t in again.trees for w in t.workers)
    assert sum(t.bytes_sent for t in again.trees) == 0

    (src / "pkg1" / "mod1.py").write_text("changed = True\n")
    (src / "pkg2" / "mod2.py").unlink()
    (src / "new.py").write_text("new = 1\n")
    third = push(Context.from_env(), name, data=False)
    [code] = third.trees
    assert third.ok and code.changed_files == 2  # the changed and the new file; the deletion is in the delta
    assert code.payload_bytes < 20 * 1024  # two small files and a delta, not the tree
    want = expected_files(src)
    for worker in sshd4.workers:
        assert remote_files(worker.home, CODE) == want
        assert not (worker.home / CODE / "pkg2" / "mod2.py").exists()
        # the old tree is removed in the background after the switch; no partial leftovers either
        wait_for(lambda home=worker.home: visible_trees(home) == [code.tree_id, code.tree_id + ".json"])


@pytest.mark.parametrize("framing", ["raw", "framed"])
def test_interrupted_push_leaves_the_old_tree(sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path,
                                              framing: str) -> None:
    name, src = setup_cluster(sshd4, tpuops_home, tmp_path)
    assert push(Context.from_env(), name, data=False).ok
    before = {w.index: remote_files(w.home, CODE) for w in sshd4.workers}
    link_before = os.readlink(sshd4.workers[1].home / CODE)

    # A payload cut off mid-stream (the client died, the network dropped): nothing changes.
    (src / "pkg0" / "mod0.py").write_text("half pushed\n")
    manifest = scan_tree(src, ["*.log", "outputs/"])
    payload = Payload.for_delta(src, manifest, None, None, compress=True)
    data = b"".join(payload.raw() if framing == "raw" else payload.framed())
    access = cluster_access(Context.from_env(), name)
    [runner] = make_runners(access, access.workers[1:2])
    try:
        cut = runner.run(agent_command("apply", "~/" + CODE, "-", manifest.tree_id),
                         stdin=data[: len(data) // 2], capture=True)
    finally:
        runner.close()
    assert cut.exit_code == 6 and b"truncated" in cut.stderr
    assert os.readlink(sshd4.workers[1].home / CODE) == link_before
    assert remote_files(sshd4.workers[1].home, CODE) == before[1]

    # The next push completes it everywhere.
    assert push(Context.from_env(), name, data=False).ok
    for worker in sshd4.workers:
        assert (worker.home / CODE / "pkg0" / "mod0.py").read_text() == "half pushed\n"
        wait_for(lambda home=worker.home: len(visible_trees(home)) == 2)  # no .partial-* or .payload-* left behind


def test_unreachable_worker_and_relay_fallback(sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name, src = setup_cluster(sshd4, tpuops_home, tmp_path)
    access = cluster_access(Context.from_env(), name)
    sshd4.stop(3)
    runners = make_runners(access, access.workers, connect_timeout=1)
    try:
        # The relay address is not on this host (TEST-NET-1): worker 0 cannot serve, so the others get
        # direct copies, and worker 3, down, is reported by name while the others finish.
        result = push_tree(runners, src, "~/" + CODE, exclude=["*.log"], cache_dir=tmp_path / "cache",
                           relay_hosts={"w0": "192.0.2.1"})
    finally:
        for runner in runners:
            runner.close()
        sshd4.start(3)
    statuses = {w.worker: w.status for w in result.workers}
    assert statuses == {"w0": "sent", "w1": "sent", "w2": "sent", "w3": "failed"}
    assert result.workers[3].error.startswith("w3: cannot connect")
    assert remote_files(sshd4.workers[2].home, CODE) == expected_files(src, ("*.log",))
    assert "outputs/ckpt" in expected_files(src, ("*.log",))


def test_destination_not_ours_is_refused(sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name, _ = setup_cluster(sshd4, tpuops_home, tmp_path)
    theirs = sshd4.workers[2].home / "data" / "ds"
    theirs.mkdir(parents=True, exist_ok=True)
    for child in theirs.iterdir():
        child.unlink() if child.is_file() or child.is_symlink() else None
    if theirs.is_symlink():
        theirs.unlink()
        theirs.mkdir()
    (theirs / "precious").write_text("user's own")
    try:
        report = push(Context.from_env(), name, code=False)
    finally:
        (theirs / "precious").unlink()
        theirs.rmdir()
    [data] = report.trees
    errors = {w.worker: w.error for w in data.workers}
    assert errors["w2"] and "was not created by tpuops push" in errors["w2"] and errors["w2"].startswith("w2:")
    assert all(error is None for worker, error in errors.items() if worker != "w2")


def test_cli_push_and_ssh(sshd4: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name, src = setup_cluster(sshd4, tpuops_home, tmp_path)
    done = run_cli("push", name, "--code-only", "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and [t["dest"] for t in report["trees"]] == ["~/" + CODE]

    done = run_cli("push", name, "--code-only", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "0 changed, 0 B sent from here (unchanged: w0, w1, w2, w3)" in done.stdout

    # tpuops ssh: the system OpenSSH client with the cluster's key and known_hosts (recorded by push).
    argv = ssh_argv(Context.from_env(), name, worker=2, forwards=["6006:localhost:6006"],
                    command=["cat", "tpuops/demo/code/pkg0/mod0.py"])
    assert argv[argv.index("-L") + 1] == "6006:localhost:6006" and argv[argv.index("-p") + 1] == str(sshd4.port)
    argv.remove("-L")
    argv.remove("6006:localhost:6006")
    done = subprocess.run([*argv[:1], "-o", "BatchMode=yes", *argv[1:]], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (src / "pkg0" / "mod0.py").read_bytes()

    done = run_cli("ssh", name, "--worker", "1", "--print", "--", "echo", "a b", timeout=30)
    assert done.returncode == 0, done.stderr
    printed = shlex.split(done.stdout)
    assert printed[-1] == "'echo' 'a b'" or printed[-1] == "echo 'a b'"
    done = run_cli("ssh", name, "--worker", "1", "--", "echo", "a b; echo c", timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a b; echo c\n"


def test_local_runner_push(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src, files=10)
    runners = [LocalRunner(f"w{i}", tmp_path / f"w{i}") for i in range(2)]
    result = push_tree(runners, src, "~/code", exclude=["*.log"], cache_dir=tmp_path / "cache")
    assert result.ok and [w.status for w in result.workers] == ["sent", "sent"]
    assert (tmp_path / "w1" / "code" / "pkg0" / "mod0.py").exists()
    again = push_tree(runners, src, "~/code", exclude=["*.log"], cache_dir=tmp_path / "cache")
    assert [w.status for w in again.workers] == ["unchanged", "unchanged"]
    assert Manifest.from_text((tmp_path / "cache" / f"{again.tree_id}.json").read_text()).tree_id == again.tree_id


def test_base_unusable_is_resent_in_full(tmp_path: Path) -> None:
    """A worker whose current tree lost a file cannot take a delta (exit EXIT_BASE_UNUSABLE): the client
    resends everything to that worker only, and the file is back."""
    src = tmp_path / "src"
    make_tree(src, files=10)
    runners = [LocalRunner(f"w{i}", tmp_path / f"w{i}") for i in range(2)]
    first = push_tree(runners, src, "~/code", exclude=["*.log"], cache_dir=tmp_path / "cache")
    assert first.ok
    (tmp_path / "w0" / ".tpuops-trees" / "code" / first.tree_id / "pkg1" / "mod1.py").unlink()
    (src / "pkg0" / "mod0.py").write_bytes(b"changed\n")
    second = push_tree(runners, src, "~/code", exclude=["*.log"], cache_dir=tmp_path / "cache")
    assert second.ok and [w.status for w in second.workers] == ["sent", "sent"]
    sent = {w.worker: w.bytes_sent for w in second.workers}
    assert sent["w0"] > sent["w1"] + 9 * 4096  # the delta, then the whole tree (nine unchanged 4 KiB files)
    for worker in ("w0", "w1"):
        assert (tmp_path / worker / "code" / "pkg1" / "mod1.py").read_bytes() == (src / "pkg1" / "mod1.py").read_bytes()
        assert (tmp_path / worker / "code" / "pkg0" / "mod0.py").read_bytes() == b"changed\n"


class FarAway(LocalRunner):
    """A local worker pushed to as if it were across a network: the payload is compressed where that pays."""

    nearby = False


@pytest.mark.parametrize("with_tar", [True, False], ids=["tar", "python-fallback"])
def test_a_compressed_payload_of_mixed_files_arrives_whole(tmp_path: Path, with_tar: bool) -> None:
    src = tmp_path / "src"
    make_tree(src, files=4)  # random bytes: stored, not deflated
    (src / "big.bin").write_bytes(os.urandom(300_000))
    (src / "corpus.txt").write_text("the same words again and again\n" * 20_000)  # deflated
    (src / ("a name with spaces and ünïcode " + "x" * 120 + ".py")).write_text("long names need pax headers\n")
    runner = FarAway("w0", tmp_path / "w0")
    if not with_tar:  # a worker without GNU tar: the agent unpacks with Python's tarfile
        (tmp_path / "bin").mkdir()
        os.symlink(sys.executable, tmp_path / "bin" / "python3")
        for tool in ("sh", "timeout", "dirname", "basename", "readlink", "ls"):  # what every worker has
            os.symlink(shutil.which(tool), tmp_path / "bin" / tool)
        runner.base_env = {"PATH": str(tmp_path / "bin")}
    result = push_tree([runner], src, "~/code", exclude=["*.log"], cache_dir=tmp_path / "cache")
    assert result.ok, result.as_dict()
    assert result.payload_bytes < 400_000 + 20 * 4096  # the text shrank, the random bytes did not grow
    assert remote_files(tmp_path / "w0", "code") == expected_files(src, ("*.log",))
    assert os.access(tmp_path / "w0" / "code" / "train.sh", os.X_OK)
