"""Tail over a local directory and over GCS (gcp-storage-emulator): values, growth, runs, damage, follow.

The trainer side is TensorBoard's own writer on a local directory; for GCS each "flush" uploads the file's
whole current content again, which is what TensorFlow's GCS filesystem does to a growing object.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gcs_emulator import GcsEmulator, gcs_emulator  # noqa: F401  (pytest fixture)
from tests.logs_writers import TbWriter, event_file_name, f32, framed, simple_event, tf2_scalar_event
from tpuops.cloud.blobs import BlobInfo, BlobStore, DirBlobStore
from tpuops.cloud.gcp.gcs_blobs import GcsBlobStore
from tpuops.errors import TransientError
from tpuops.logs.tail import Backoff, Tail, follow, latest_values
from tpuops.retry import transient


class CountingStore:
    """A BlobStore wrapper that counts listings and bytes fetched (and can fail listings on demand)."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.listings = 0
        self.bytes_read = 0
        self.fail_listings = 0

    @property
    def url(self) -> str:
        return self.inner.url

    def list(self, prefix: str = "", *, checksums: bool = False) -> list[BlobInfo]:
        self.listings += 1
        if self.fail_listings:
            self.fail_listings -= 1
            raise TransientError("listing failed (injected)")
        return self.inner.list(prefix, checksums=checksums)

    def read_range(self, name: str, start: int, end: int) -> bytes:
        data = self.inner.read_range(name, start, end)
        self.bytes_read += len(data)
        return data

    def upload_file(self, local_path: str | Path, name: str) -> BlobInfo:
        return self.inner.upload_file(local_path, name)

    def delete(self, name: str) -> None:
        self.inner.delete(name)


class Place:
    """Where event files live, as the tail sees them: the writer's own directory, or a GCS prefix that the
    writer's directory is copied to on every `publish` (whole objects, as GCS writers do)."""

    def __init__(self, workdir: Path, store: BlobStore, gcs: GcsEmulator | None, bucket: str | None) -> None:
        self.workdir = workdir
        self.store = CountingStore(store)
        self._gcs = gcs
        self._bucket = bucket

    def publish(self) -> None:
        if self._gcs is None:
            return  # the tail reads the writer's directory itself
        bucket = self._gcs.client().bucket(self._bucket)
        for path in sorted(self.workdir.rglob("*")):
            if path.is_file():
                bucket.blob("logs/" + path.relative_to(self.workdir).as_posix()).upload_from_filename(str(path))

    def remove(self, relative: str) -> None:
        (self.workdir / relative).unlink()
        if self._gcs is not None:
            self._gcs.client().bucket(self._bucket).blob("logs/" + relative).delete()

    def write_bytes(self, relative: str, data: bytes) -> None:
        path = self.workdir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.publish()


@pytest.fixture(params=["dir", "gcs"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    workdir = tmp_path / "logs"
    workdir.mkdir()
    if request.param == "dir":
        yield Place(workdir, DirBlobStore(workdir), None, None)
        return
    gcs: GcsEmulator = request.getfixturevalue("gcs_emulator")
    bucket = gcs.new_bucket()
    store = GcsBlobStore(bucket, "logs", env=gcs.env, policy=lambda: transient(attempts=2, sleep=lambda _: None))
    yield Place(workdir, store, gcs, bucket)


def as_tuples(points) -> list[tuple[str, str, int, float]]:
    return [(p.run, p.tag, p.step, p.value) for p in points]


def test_several_runs_values_equal_what_was_written(place: Place) -> None:
    for run in ("train", "eval", "."):
        writer = TbWriter(place.workdir / run)
        writer.scalars(range(20), tag=f"{run}/loss", value=lambda s: 0.5 * s)
        writer.close()
    place.publish()
    tail = Tail(place.store)
    points = tail.poll()
    expected = [(run, f"{run}/loss", s, 0.5 * s) for run in (".", "eval", "train") for s in range(20)]
    assert sorted(as_tuples(points)) == sorted(expected)
    assert tail.runs == [".", "eval", "train"]
    latest = latest_values(points)
    assert latest[("train", "train/loss")].step == 19


def test_only_appended_bytes_are_read_and_listing_is_once_per_poll(place: Place) -> None:
    writer = TbWriter(place.workdir / "train")
    writer.scalars(range(10))
    place.publish()
    tail = Tail(place.store)
    assert len(tail.poll()) == 10
    assert place.store.bytes_read == writer.path.stat().st_size
    for round_ in range(3):
        before_size = writer.path.stat().st_size
        before_read = place.store.bytes_read
        writer.scalars(range(10 + 5 * round_, 15 + 5 * round_))
        place.publish()
        listings = place.store.listings
        new = tail.poll()
        assert [p.step for p in new] == list(range(10 + 5 * round_, 15 + 5 * round_))
        assert place.store.listings == listings + 1
        assert place.store.bytes_read - before_read == writer.path.stat().st_size - before_size
        assert tail.last.bytes_read == writer.path.stat().st_size - before_size
    idle_read = place.store.bytes_read
    assert tail.poll() == [] and place.store.bytes_read == idle_read and tail.last.bytes_read == 0
    writer.close()


def test_a_file_appearing_later_and_a_new_run_are_picked_up(place: Place) -> None:
    first = TbWriter(place.workdir / "train")
    first.scalars(range(3))
    place.publish()
    tail = Tail(place.store)
    assert len(tail.poll()) == 3
    later = TbWriter(place.workdir / "eval")
    later.scalars(range(100, 102), tag="accuracy", value=lambda s: 0.5)
    place.publish()
    assert as_tuples(tail.poll()) == [("eval", "accuracy", 100, 0.5), ("eval", "accuracy", 101, 0.5)]
    assert tail.runs == ["eval", "train"]
    first.close()
    later.close()


def test_truncated_last_record_is_completed_without_refetching(place: Place) -> None:
    data = framed(*(simple_event(s, {"loss": float(s)}) for s in range(4)))
    name = f"train/{event_file_name()}"
    cut = len(data) - 9  # inside the last record
    place.write_bytes(name, data[:cut])
    tail = Tail(place.store)
    assert [p.step for p in tail.poll()] == [0, 1, 2]
    place.write_bytes(name, data)
    assert [p.step for p in tail.poll()] == [3]
    assert place.store.bytes_read == len(data)  # no byte fetched twice


def test_corrupted_record_is_skipped_with_a_warning_naming_file_and_offset(place: Place) -> None:
    records = [framed(simple_event(s, {"loss": float(s)})) for s in range(3)]
    damaged = bytearray(records[1])
    damaged[-1] ^= 0xFF  # the data CRC
    name = f"run1/{event_file_name()}"
    place.write_bytes(name, records[0] + bytes(damaged) + records[2])
    warnings: list[str] = []
    points = Tail(place.store, warn=warnings.append).poll()
    assert [p.step for p in points] == [0, 2]
    assert len(warnings) == 1
    assert name in warnings[0] and f"offset {len(records[0])}" in warnings[0] and "bad data CRC" in warnings[0]


def test_tf2_tensor_scalars(place: Place) -> None:
    events = [tf2_scalar_event(s, "epoch_loss", 1.0 / (s + 1), with_metadata=(s == 0)) for s in range(5)]
    place.write_bytes(f"train/{event_file_name()}", framed(*events))
    assert as_tuples(Tail(place.store).poll()) == [("train", "epoch_loss", s, f32(1.0 / (s + 1))) for s in range(5)]


def test_deleted_file_is_dropped_and_a_replaced_file_is_read_again(place: Place) -> None:
    name_a, name_b = f"a/{event_file_name(1)}", f"b/{event_file_name(2)}"
    place.write_bytes(name_a, framed(*(simple_event(s, {"x": 1.0}) for s in range(5))))
    place.write_bytes(name_b, framed(*(simple_event(s, {"y": 2.0}) for s in range(5))))
    warnings: list[str] = []
    tail = Tail(place.store, warn=warnings.append)
    assert len(tail.poll()) == 10
    place.remove(name_a)
    place.write_bytes(name_b, framed(simple_event(50, {"y": 3.0})))  # shorter: a new file under the old name
    assert as_tuples(tail.poll()) == [("b", "y", 50, 3.0)]
    assert tail.files == [name_b]
    assert any("shrank" in w for w in warnings)


def test_filters_tag_run_since(place: Place) -> None:
    for run in ("train", "eval"):
        place.write_bytes(f"{run}/{event_file_name()}",
                          framed(*(simple_event(s, {"loss": 1.0, "lr": 0.5}) for s in range(10))))
    points = Tail(place.store, tag="^lr$", run="train", since=7).poll()
    assert as_tuples(points) == [("train", "lr", s, 0.5) for s in (7, 8, 9)]


def test_follow_sees_a_writer_appending_and_survives_a_failing_poll(place: Place) -> None:
    writer = TbWriter(place.workdir / "train")
    writer.scalars(range(2))
    place.publish()
    clock = [0.0]
    appended = []

    def sleep(seconds: float) -> None:
        """The trainer goes on while we wait: it appends one step per wait, four times; the second wait also
        breaks the next listing (the network hiccups)."""
        clock[0] += seconds
        if len(appended) < 4:
            step = 2 + len(appended)
            writer.scalars(range(step, step + 1))
            place.publish()
            appended.append(step)
            if len(appended) == 2:
                place.store.fail_listings = 1

    warnings: list[str] = []
    tail = Tail(place.store)
    batches = list(follow(tail, backoff=Backoff(initial=1.0, maximum=4.0), until_idle=10.0, warn=warnings.append,
                          sleep=sleep, clock=lambda: clock[0]))
    steps = [p.step for batch in batches for p in batch]
    assert steps == [0, 1, 2, 3, 4, 5]
    assert len(warnings) == 1 and "injected" in warnings[0]
    writer.close()


def test_follow_backs_off_while_idle() -> None:
    class Idle:
        from tpuops.logs.tail import PollStats

        last = PollStats(files=1, bytes_read=0, points=0)

        def poll(self) -> list:
            return []

    waits: list[float] = []
    clock = [0.0]

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock[0] += seconds

    assert list(follow(Idle(), backoff=Backoff(initial=1.0, maximum=4.0, factor=2.0), until_idle=20.0,
                       sleep=sleep, clock=lambda: clock[0])) == []
    assert waits[:4] == [2.0, 4.0, 4.0, 4.0]
    assert clock[0] >= 20.0


def test_first_poll_failure_is_an_error(tmp_path: Path) -> None:
    store = CountingStore(DirBlobStore(tmp_path))
    store.fail_listings = 1
    with pytest.raises(TransientError):
        next(follow(Tail(store), sleep=lambda _: None))


def test_a_failing_file_read_does_not_hide_the_others(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / event_file_name()).write_bytes(framed(simple_event(1, {"x": 1.0})))
    (tmp_path / "b" / event_file_name()).write_bytes(framed(simple_event(2, {"y": 2.0})))

    class FlakyRead(CountingStore):
        def read_range(self, name: str, start: int, end: int) -> bytes:
            if name.startswith("a/") and self.listings == 1:
                raise TransientError("read failed (injected)")
            return super().read_range(name, start, end)

    warnings: list[str] = []
    tail = Tail(FlakyRead(DirBlobStore(tmp_path)), warn=warnings.append)
    assert as_tuples(tail.poll()) == [("b", "y", 2, 2.0)]
    assert as_tuples(tail.poll()) == [("a", "x", 1, 1.0)]  # retried on the next poll, from the same offset
    assert len(warnings) == 1


def test_tail_of_a_missing_directory_finds_nothing(tmp_path: Path) -> None:
    tail = Tail(DirBlobStore(tmp_path / "not-yet"))
    assert tail.poll() == [] and tail.last.files == 0


def test_large_growth_is_read_in_bounded_ranges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tpuops.logs.tail as tail_module

    monkeypatch.setattr(tail_module, "READ_CHUNK", 7)  # every record straddles several range reads
    data = framed(*(simple_event(s, {"loss": float(s)}) for s in range(20)))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / event_file_name()).write_bytes(data)

    class Ranges(CountingStore):
        widest = 0

        def read_range(self, name: str, start: int, end: int) -> bytes:
            Ranges.widest = max(Ranges.widest, end - start)
            return super().read_range(name, start, end)

    store = Ranges(DirBlobStore(tmp_path))
    assert [p.step for p in Tail(store).poll()] == list(range(20))
    assert store.bytes_read == len(data) and Ranges.widest == 7


def test_a_valid_frame_holding_junk_is_skipped_with_a_warning(tmp_path: Path) -> None:
    from tpuops.logs.tfrecord import frame_record

    (tmp_path / "r").mkdir()
    junk = frame_record(b"\xff\xff\xff\xff")  # framing and CRCs fine, not an Event
    (tmp_path / "r" / event_file_name()).write_bytes(framed(simple_event(1, {"x": 1.0})) + junk
                                                     + framed(simple_event(2, {"x": 2.0})))
    warnings: list[str] = []
    assert [p.step for p in Tail(DirBlobStore(tmp_path), warn=warnings.append).poll()] == [1, 2]
    assert len(warnings) == 1 and "undecodable event" in warnings[0]
