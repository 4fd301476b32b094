"""Compare-and-swap on the blob stores: the guard's lease rests on it. GCS is fake-gcs-server (which answers
412 as GCS does); the local provider's directory store is checked across real processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fake_gcs import FakeGcs, fake_gcs  # noqa: F401  (pytest fixture)
from tpuops.cloud.blobs import BlobNotFound, DirBlobStore, PreconditionFailed
from tpuops.cloud.gcp.gcs_blobs import GcsBlobStore
from tpuops.retry import transient


@pytest.fixture(params=["gcs", "dir"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "dir":
        return DirBlobStore(tmp_path / "bucket")
    server: FakeGcs = request.getfixturevalue("fake_gcs")
    return GcsBlobStore(server.new_bucket(), ".tpuops/c1", env=server.env,
                        policy=lambda: transient(attempts=2, sleep=lambda _: None))


def test_create_if_absent_is_refused_the_second_time(store) -> None:
    first = store.write_bytes("guard/lease.json", b"one", if_generation_match=0)
    assert first > 0
    with pytest.raises(PreconditionFailed):
        store.write_bytes("guard/lease.json", b"two", if_generation_match=0)
    assert store.read_versioned("guard/lease.json").data == b"one"


def test_a_stale_generation_is_refused_and_the_current_one_wins(store) -> None:
    generation = store.write_bytes("lease", b"a")
    read = store.read_versioned("lease")
    assert (read.data, read.generation) == (b"a", generation)
    newer = store.write_bytes("lease", b"b", if_generation_match=generation)
    assert newer != generation
    with pytest.raises(PreconditionFailed):
        store.write_bytes("lease", b"c", if_generation_match=generation)  # the generation read before "b"
    assert store.read_versioned("lease") .data == b"b"
    assert store.write_bytes("lease", b"d", if_generation_match=newer) != newer


def test_missing_blob_and_hidden_bookkeeping(store) -> None:
    with pytest.raises(BlobNotFound):
        store.read_versioned("nothing-here")
    store.write_bytes("x/y", b"1")
    assert [info.name for info in store.list()] == ["x/y"]  # no lock or counter files in a listing
    store.delete("x/y")
    with pytest.raises(BlobNotFound):
        store.read_versioned("x/y")
    assert store.write_bytes("x/y", b"again", if_generation_match=0) > 0  # deleted: absent again


RACER = textwrap.dedent("""
    import sys
    from tpuops.cloud.blobs import DirBlobStore, PreconditionFailed
    store = DirBlobStore(sys.argv[1])
    won = 0
    for _ in range(int(sys.argv[2])):
        while True:
            current = store.read_versioned("counter")
            try:
                store.write_bytes("counter", str(int(current.data) + 1).encode(),
                                  if_generation_match=current.generation)
                won += 1
                break
            except PreconditionFailed:
                continue
    print(won)
""")


def test_directory_cas_holds_between_processes(tmp_path: Path) -> None:
    """Four processes increment one counter through read + conditional write: no increment is lost."""
    store = DirBlobStore(tmp_path / "bucket")
    store.write_bytes("counter", b"0", if_generation_match=0)
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(store.root), "50"], stdout=subprocess.PIPE,
                               text=True) for _ in range(4)]
    try:
        outputs = [racer.communicate(timeout=120)[0] for racer in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait(timeout=10)
    assert sum(int(out) for out in outputs) == 200
    assert store.read_versioned("counter").data == b"200"
