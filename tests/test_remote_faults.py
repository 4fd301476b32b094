"""Faults and edges of the remote layer: booting workers, refused keys, loose key files, missing commands,
data to gs:// (GCS emulator and the local provider's buckets), pushes to local workers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gcs_emulator import GcsEmulator, gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import write_spec
from tests.sshd import SshdCluster, keygen, sshd_available
from tpuops.context import Context
from tpuops.errors import RemoteError
from tpuops.ops.push import push
from tpuops.ops.remote import exec_command

pytestmark = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")

SPEC = """
name: demo
zone: europe-west4-a
tpu:
  type: v3-32
"""


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd2"), 2) as cluster:
        yield cluster


def cluster_dir(sshd: SshdCluster, tpuops_home: Path, tmp_path: Path, spec_text: str = SPEC) -> Path:
    return sshd.write_cluster(tpuops_home, "demo", write_spec(tmp_path, spec_text))


def test_booting_worker_is_waited_for(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    cluster_dir(sshd2, tpuops_home, tmp_path)
    sshd2.stop(1)
    starter = threading.Timer(1.0, sshd2.start, args=(1,))
    starter.start()
    try:
        report = exec_command(Context.from_env(), "demo", ["true"], connect_timeout=20)
    finally:
        starter.join(timeout=20)
    assert report.ok, report.as_dict()


def test_refused_key_missing_command_and_loose_key(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    directory = cluster_dir(sshd2, tpuops_home, tmp_path)
    report = exec_command(Context.from_env(), "demo", ["no-such-command-here"], capture=True)
    assert [r.exit_code for r in report.results] == [127, 127] and not report.ok

    (directory / "id_ed25519").chmod(0o644)
    with pytest.raises(RemoteError, match="readable by other users"):
        exec_command(Context.from_env(), "demo", ["true"])

    (directory / "id_ed25519").unlink()
    (directory / "id_ed25519.pub").unlink()
    keygen(directory / "id_ed25519")  # a key the workers do not know
    report = exec_command(Context.from_env(), "demo", ["true"], connect_timeout=2)
    assert [r.error.split(":")[0] for r in report.results] == ["w0", "w1"]
    assert all("refused the cluster's key" in r.error for r in report.results)


def test_data_to_gcs_skips_what_is_there(
    sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path, gcs_emulator: GcsEmulator  # noqa: F811
) -> None:
    bucket = gcs_emulator.new_bucket()
    data = tmp_path / "dataset"
    (data / "shards").mkdir(parents=True)
    for i in range(5):
        (data / "shards" / f"part-{i}.txt").write_text(f"shard {i}\n" * 100)
    spec = SPEC + f"data:\n  - from: ./dataset\n    to: gs://{bucket}/ds\n"
    cluster_dir(sshd2, tpuops_home, tmp_path, spec)
    ctx = Context.from_env(env={**__import__("os").environ, **gcs_emulator.env})
    progress: list[tuple[str, int, int]] = []
    first = push(ctx, "demo", code=False, on_upload=lambda *p: progress.append(p))
    assert first.ok, first.as_dict()
    [upload] = first.uploads
    assert (upload.files, upload.uploaded, upload.skipped) == (5, 5, 0)
    assert progress[-1][1] == progress[-1][2] == upload.bytes_uploaded
    names = sorted(b.name for b in gcs_emulator.client().list_blobs(bucket))
    assert names == [f"ds/shards/part-{i}.txt" for i in range(5)]

    (data / "shards" / "part-2.txt").write_text("changed\n")
    second = push(ctx, "demo", code=False)
    [upload] = second.uploads
    assert (upload.uploaded, upload.skipped) == (1, 4)
    blob = gcs_emulator.client().bucket(bucket).blob("ds/shards/part-2.txt")
    assert blob.download_as_bytes() == b"changed\n"


def test_local_provider_push_and_exec(tmp_path: Path, tpuops_home: Path) -> None:
    """provider: local: workers are directories, the bucket a directory; the same workflows apply."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "a.txt").write_text("a\n")
    spec = write_spec(tmp_path, """
        name: demo
        provider: local
        tpu:
          type: v3-8
          workers: 2
        code:
          path: ./src
        data:
          - from: ./ds
            to: gs://local-bucket/ds
          - from: ./ds
            to: ~/data
        """)
    homes = [tmp_path / "workers" / f"w{i}" for i in range(2)]
    state = {
        "name": "demo", "provider": "local", "spec_path": str(spec),
        "workers": [{"index": i, "internal_ip": "127.0.0.1", "ssh_host": "127.0.0.1", "home": str(home)}
                    for i, home in enumerate(homes)],
    }
    (tpuops_home / "clusters" / "demo").mkdir(parents=True)
    (tpuops_home / "clusters" / "demo" / "state.json").write_text(json.dumps(state))
    report = push(Context.from_env(), "demo")
    assert report.ok, report.as_dict()
    for home in homes:
        assert (home / "tpuops/demo/code/train.py").read_text() == "print('hi')\n"
        assert (home / "data/a.txt").read_text() == "a\n"
    assert (tpuops_home / "local/buckets/local-bucket/ds/a.txt").read_text() == "a\n"
    done = exec_command(Context.from_env(), "demo", "cd tpuops/demo/code && python3 train.py", capture=True)
    assert done.ok and [r.stdout for r in done.results] == [b"hi\n", b"hi\n"]


def test_host_key_line_format_is_openssh(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    """What we record on first use is what OpenSSH's `ssh-keygen -F` finds (so `tpuops ssh` shares it)."""
    directory = cluster_dir(sshd2, tpuops_home, tmp_path)
    assert exec_command(Context.from_env(), "demo", ["true"]).ok
    worker = sshd2.workers[0]
    import subprocess

    found = subprocess.run(["ssh-keygen", "-F", f"[{worker.host}]:{worker.port}", "-f",
                            str(directory / "known_hosts")], capture_output=True, text=True, timeout=10)
    assert found.returncode == 0 and worker.host_key_line().split(" ", 1)[1] in found.stdout
    lines = (directory / "known_hosts").read_text().splitlines()
    assert len(lines) == len(sshd2.workers)  # one line per worker, no duplicates on reuse
    # And OpenSSH itself accepts it with strict checking, as `tpuops ssh` runs it.
    openssh = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o",
         f"UserKnownHostsFile={directory / 'known_hosts'}", "-i", str(directory / "id_ed25519"),
         "-p", str(worker.port), f"root@{worker.host}", "echo strict-ok"],
        capture_output=True, text=True, timeout=30)
    assert openssh.returncode == 0 and openssh.stdout.strip() == "strict-ok", openssh.stderr


def test_legacy_node_targets_only_the_client_vm(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    directory = cluster_dir(sshd2, tpuops_home, tmp_path)
    state = json.loads((directory / "state.json").read_text())
    state["workers"][1]["role"] = "client_vm"  # as `up` records a legacy Node's driver VM
    (directory / "state.json").write_text(json.dumps(state))
    report = exec_command(Context.from_env(), "demo", "touch ~/was-here")
    assert report.ok and [r.worker for r in report.results] == ["client"]
    assert (sshd2.workers[1].home / "was-here").exists() and not (sshd2.workers[0].home / "was-here").exists()
    (sshd2.workers[1].home / "was-here").unlink()


def test_full_remote_disk_is_reported_for_that_worker(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "big.bin").write_bytes(__import__("os").urandom(256 * 1024))
    cluster_dir(sshd2, tpuops_home, tmp_path, SPEC + "data:\n  - from: ./dataset\n    to: ~/small/ds\n")
    # Worker 1 gets a 64 KiB disk at ~/small (a tmpfs mounted inside its own mount namespace).
    mounted = exec_command(Context.from_env(), "demo", "mkdir -p ~/small && mount -t tmpfs -o size=64k tmpfs ~/small",
                           workers="1", capture=True)
    assert mounted.ok, mounted.results[0].stderr
    try:
        report = push(Context.from_env(), "demo", code=False)
    finally:
        exec_command(Context.from_env(), "demo", "umount ~/small", workers="1")
    [tree] = report.trees
    errors = {w.worker: w.error for w in tree.workers}
    assert errors["w0"] is None
    assert errors["w1"].startswith("w1: push to ~/small/ds failed") and "No space left on device" in errors["w1"]
    assert "free space" in errors["w1"]
