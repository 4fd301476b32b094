"""--worker and --slice: indexes counted across slices, slice names (s1w3), ranges, and one clear line for
what does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tpuops.access.workers import one_worker, select_workers
from tpuops.errors import UsageError
from tpuops.state import WorkerRecord


def workers(slices: int, hosts: int) -> list[WorkerRecord]:
    multislice = slices > 1
    return [WorkerRecord(index=s * hosts + i, internal_ip=f"10.0.{s}.{i}", ssh_host=f"10.0.{s}.{i}", slice=s,
                         slice_index=i if multislice else None) for s in range(slices) for i in range(hosts)]


def names(chosen: list[WorkerRecord]) -> list[str]:
    return [w.name for w in chosen]


@pytest.mark.parametrize(("selection", "slices", "expected"), [
    (None, None, ["s0w0", "s0w1", "s1w0", "s1w1", "s2w0", "s2w1"]),
    ("all", "1", ["s1w0", "s1w1"]),
    (None, "0,2", ["s0w0", "s0w1", "s2w0", "s2w1"]),
    ("3", None, ["s1w1"]),  # global index: slice by slice
    ("w3", None, ["s1w1"]),
    ("s1w1,0", None, ["s0w0", "s1w1"]),
    ("s2w0-1", None, ["s2w0", "s2w1"]),
    ("s2w0-s2w1", None, ["s2w0", "s2w1"]),
    ("1-3", None, ["s0w1", "s1w0", "s1w1"]),
    ("S1W0", None, ["s1w0"]),
    ("s1w0,2", "1", ["s1w0"]),  # the same worker twice is chosen once
])
def test_selection_across_slices(selection: str | None, slices: str | None, expected: list[str]) -> None:
    assert names(select_workers(workers(3, 2), selection, slices)) == expected


@pytest.mark.parametrize(("selection", "slices", "message"), [
    ("s3w0", None, "no slice 3"),
    ("s1w2", None, "no worker s1w2"),
    ("6", None, "no worker 6"),
    ("3-1", None, "reversed"),
    ("s1w1-0", None, "reversed"),
    ("s0w1-s1w0", None, "stays within one slice"),  # never read as s0w1-0
    ("1-s1w0", None, "stays within one slice"),
    ("x1", None, "expected `all`"),
    ("0", "5", "no slice 5"),
    ("0", "one", "--slice 'one'"),
    ("s1w0", "0", "not in --slice 0"),
])
def test_bad_selection_is_one_usage_error(selection: str, slices: str | None, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        select_workers(workers(3, 2), selection, slices)


def test_a_reversed_range_says_how_to_write_it() -> None:
    with pytest.raises(UsageError) as plain:
        select_workers(workers(3, 2), "3-1")
    with pytest.raises(UsageError) as sliced:
        select_workers(workers(3, 2), "s1w1-0")
    assert plain.value.hint == "write it low to high: 1-3" and sliced.value.hint == "write it low to high: s1w0-1"


def test_one_slice_keeps_plain_names() -> None:
    chosen = select_workers(workers(1, 4), "0,2-3")
    assert names(chosen) == ["w0", "w2", "w3"]
    with pytest.raises(UsageError, match="no slice 1") as err:
        select_workers(workers(1, 4), "s1w0")
    assert "one slice" in (err.value.hint or "")


def test_ssh_goes_to_one_worker() -> None:
    assert names(one_worker(workers(2, 2), "0", "1")) == ["s1w0"]  # --slice 1 alone: its first host
    assert names(one_worker(workers(2, 2), "s1w1")) == ["s1w1"]
    assert names(one_worker(workers(2, 2), "2")) == ["s1w0"]
    with pytest.raises(UsageError, match="one worker"):
        one_worker(workers(2, 2), "0,1")


def test_a_one_slice_cluster_takes_s0wn_as_worker_n() -> None:
    assert names(select_workers(workers(1, 4), "s0w1")) == ["w1"]
    assert names(select_workers(workers(1, 4), "s0w2-3,0")) == ["w0", "w2", "w3"]
    assert names(one_worker(workers(1, 4), "s0w3")) == ["w3"]
    with pytest.raises(UsageError, match="no worker s0w4") as err:
        select_workers(workers(1, 4), "s0w4")
    assert err.value.hint == "slice 0 has s0w0-3"
    with pytest.raises(UsageError, match="no slice 1") as other:
        select_workers(workers(1, 4), "s1w0")
    assert other.value.hint == "this cluster has one slice: s0wN is worker N"


def test_exec_on_a_one_slice_cluster_with_a_slice_name(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: oneslice
        provider: local
        tpu: {type: v2-8, workers: 2}
        """)
    assert run_cli("up", str(spec)).returncode == 0
    try:
        result = run_cli("exec", "oneslice", "--worker", "s0w1", "--", "echo ok")
        assert result.returncode == 0, result.stderr
        assert [line for line in result.stdout.splitlines() if line.startswith("[")] == ["[w1] ok"]
    finally:
        run_cli("down", "oneslice", "--yes")
