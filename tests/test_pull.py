"""`tpuops pull`: files back from the workers, over real sshd on loopback and on the local simulator: incremental,
resumable, one folder per worker, names that would leave the destination refused, host keys checked."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.context import Context
from tpuops.ops.pull import pull
from tpuops.remote.pull import RemoteEntry, partial_name, unsafe_reason

SPEC = """
name: demo
zone: europe-west4-a
tpu:
  type: v3-32
code:
  path: ./src
"""
needs_sshd = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    if not sshd_available():
        pytest.skip("needs root and OpenSSH sshd")
    with SshdCluster(tmp_path_factory.mktemp("sshd-pull"), 2) as cluster:
        yield cluster


def make_cluster(sshd: SshdCluster, tpuops_home: Path, tmp_path: Path) -> str:
    sshd.write_cluster(tpuops_home, "demo", write_spec(tmp_path, SPEC), pin=True)
    return "demo"


def checkpoint(home: Path, big: bytes) -> Path:
    root = home / "ckpt"
    if root.exists():
        import shutil

        shutil.rmtree(root)
    (root / "sub").mkdir(parents=True)
    (root / "model.bin").write_bytes(big)
    (root / "sub" / "notes.txt").write_text("step 1000\n")
    (root / "sub" / "empty").write_bytes(b"")
    os.symlink("../model.bin", root / "sub" / "latest")
    return root


def files_under(root: Path) -> dict[str, bytes]:
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            rel = str(path.relative_to(root))
            found[rel] = b"->" + os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return found


@needs_sshd
def test_pull_copies_then_only_changes_then_resumes(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd2, tpuops_home, tmp_path)
    big = os.urandom(20 * 1024 * 1024 + 123)  # more than one read batch
    remote_root = checkpoint(sshd2.workers[0].home, big)
    out = tmp_path / "out"

    first = pull(Context.from_env(), name, "~/ckpt", out)
    assert first.ok, first.as_dict()
    [part] = first.workers
    assert (part.files, part.fetched, part.unchanged) == (3, 3, 0)
    assert part.bytes_fetched == len(big) + len("step 1000\n")
    assert files_under(out / "ckpt") == files_under(remote_root)
    assert (out / "ckpt" / "model.bin").stat().st_mtime_ns == (remote_root / "model.bin").stat().st_mtime_ns

    again = pull(Context.from_env(), name, "ckpt", out)  # relative to the worker's home: the same path
    assert again.ok and (again.workers[0].fetched, again.workers[0].bytes_fetched) == (0, 0)

    (remote_root / "sub" / "notes.txt").write_text("step 2000, longer\n")
    changed = pull(Context.from_env(), name, "ckpt", out)
    assert changed.workers[0].fetched == 1 and changed.workers[0].bytes_fetched == len("step 2000, longer\n")

    # An interrupted pull left the first 5 MB of a new version of the model: only the rest moves.
    new_big = os.urandom(len(big))
    (remote_root / "model.bin").write_bytes(new_big)
    entry = RemoteEntry("model.bin", "f", len(new_big), (remote_root / "model.bin").stat().st_mtime_ns, 0o644)
    (out / "ckpt" / partial_name(entry)).write_bytes(new_big[:5 * 1024 * 1024])
    resumed = pull(Context.from_env(), name, "ckpt", out)
    assert resumed.ok and resumed.workers[0].bytes_fetched == len(new_big) - 5 * 1024 * 1024
    assert (out / "ckpt" / "model.bin").read_bytes() == new_big
    assert not list((out / "ckpt").glob(".tpuops-partial-*"))  # no partial file left


@needs_sshd
def test_pull_all_workers_cli_refuses_escapes_and_checks_host_keys(
    sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path
) -> None:
    name = make_cluster(sshd2, tpuops_home, tmp_path)
    for worker in sshd2.workers:
        (worker.home / "profile").mkdir(exist_ok=True)
        (worker.home / "profile" / "trace.json").write_text(f'{{"worker": {worker.index}}}')
    escape = sshd2.workers[1].home / "profile" / "escape"
    escape.unlink(missing_ok=True)
    os.symlink("/etc/passwd", escape)
    out = tmp_path / "out"
    done = run_cli("pull", name, "profile", str(out), "--worker", "all", "--json")
    assert done.returncode == 1, done.stderr  # the refused symlink: not everything asked for holds
    report = json.loads(done.stdout)
    assert [w["ok"] for w in report["workers"]] == [True, False]
    assert report["workers"][1]["refused"] == ["profile/escape (a symlink to an absolute path (/etc/passwd))"]
    for index in (0, 1):
        assert json.loads((out / f"w{index}" / "profile" / "trace.json").read_text()) == {"worker": index}
    assert not (out / "w1" / "profile" / "escape").is_symlink()
    escape.unlink()

    plain = run_cli("pull", name, "profile/trace.json", str(tmp_path / "one"))
    assert plain.returncode == 0, plain.stderr
    assert "1 copied" in plain.stdout and (tmp_path / "one" / "trace.json").read_text() == '{"worker": 0}'

    # A worker whose host key is not the pinned one is refused, as exec and push refuse it.
    sshd2.new_host_key(0)
    refused = run_cli("pull", name, "profile", str(tmp_path / "again"))
    assert refused.returncode == 1 and "host key" in refused.stderr and "w0" in refused.stderr
    assert not (tmp_path / "again" / "profile").exists()


@needs_sshd
def test_pull_bad_input_is_one_line(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd2, tpuops_home, tmp_path)
    missing = run_cli("pull", name, "no/such/dir", str(tmp_path / "x"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    unknown = run_cli("pull", name, "x", "--worker", "7")
    assert unknown.returncode == 2 and "no worker 7" in unknown.stderr
    (tmp_path / "afile").write_text("")
    into_file = run_cli("pull", name, "x", str(tmp_path / "afile"))
    assert into_file.returncode == 2 and "is a file, not a directory" in into_file.stderr


def test_pull_on_the_local_simulator(tpuops_home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: sim
        provider: local
        tpu: {type: v2-8, workers: 2}
        code: {path: ./src}
    """)
    (tmp_path / "src").mkdir()
    assert run_cli("up", str(spec)).returncode == 0
    try:
        made = run_cli("exec", "sim", "--", "mkdir -p out && echo $HOME > out/where")
        assert made.returncode == 0, made.stderr
        done = run_cli("pull", "sim", "out", str(tmp_path / "back"), "--worker", "all")
        assert done.returncode == 0, done.stderr
        homes = [(tmp_path / "back" / f"w{i}" / "out" / "where").read_text().strip() for i in (0, 1)]
        assert homes[0] != homes[1] and homes[0].endswith("w0")
        # A path that is itself a symlink (push makes ~/tpuops/NAME/code one) is followed; what is inside is not.
        links = run_cli("exec", "sim", "--worker", "0", "--", "ln -s out linked && ln -s out/where where")
        assert links.returncode == 0, links.stderr
        linked = run_cli("pull", "sim", "linked", str(tmp_path / "via"))
        assert linked.returncode == 0, linked.stderr
        assert (tmp_path / "via" / "linked" / "where").read_text() == f"{homes[0]}\n"
        one = run_cli("pull", "sim", "where", str(tmp_path / "via"))
        assert one.returncode == 0 and (tmp_path / "via" / "where").read_text() == f"{homes[0]}\n"
    finally:
        assert run_cli("down", "sim", "--yes").returncode == 0


@pytest.mark.parametrize(("path", "link", "refused"), [
    ("a/b.txt", None, False),
    ("../up", None, True),
    ("a/../../up", None, True),
    ("/etc/passwd", None, True),
    ("a/link", "../b", False),  # a/link -> b: still inside
    ("a/link", "../../b", True),
    ("a/link", "/abs", True),
    ("a/link", "./c/../../..", True),
])
def test_names_that_leave_the_destination_are_refused(path: str, link: str | None, refused: bool) -> None:
    entry = RemoteEntry(path, "l" if link else "f", 0, 0, 0o644, link)
    assert (unsafe_reason(entry) is not None) == refused
