"""exec over real sshd workers on loopback: fan-out, failures, unreachable workers, host keys, quoting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.access.cluster import cluster_access, make_runners
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.ops.remote import exec_command
from tpuops.remote.fanout import exec_all
from tpuops.remote.local import LocalRunner

pytestmark = pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd")

SPEC = """
name: {name}
zone: europe-west4-a
tpu:
  type: v3-64
"""
HOSTILE = ["; rm -rf ~", "a'b\"c", "line1\nline2", "$(touch ~/pwned)", "`touch ~/pwned2`", "*", "-n", ""]


@pytest.fixture(scope="module")
def sshd8(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd8"), 8) as cluster:
        yield cluster


def make_cluster(sshd: SshdCluster, tpuops_home: Path, tmp_path: Path, name: str = "demo", pin: bool = False) -> str:
    spec = write_spec(tmp_path, SPEC.format(name=name))
    sshd.write_cluster(tpuops_home, name, spec, pin=pin)
    return name


def test_exec_on_one_and_eight_workers(sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path)
    lines: list[tuple[str, str, str]] = []
    one = exec_command(Context.from_env(), name, "echo hello; echo oops >&2", workers="0",
                       on_line=lambda *line: lines.append(line))
    assert one.ok and [r.worker for r in one.results] == ["w0"]
    assert sorted(lines) == [("w0", "stderr", "oops"), ("w0", "stdout", "hello")]

    # Every worker has its own home: each writes its own marker and sees only its own.
    everyone = exec_command(Context.from_env(), name, "echo $RANDOM > ~/mine && ls ~ | wc -l", capture=True)
    assert everyone.ok
    assert [r.worker for r in everyone.results] == [f"w{i}" for i in range(8)]
    assert {r.stdout.strip() for r in everyone.results} == {b"1"}
    assert all((w.home / "mine").exists() for w in sshd8.workers)


def test_one_failing_worker_does_not_stop_the_others(sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path)
    (sshd8.workers[2].home / "fail").write_text("")
    try:
        report = exec_command(Context.from_env(), name, "test ! -e ~/fail && echo fine", capture=True)
    finally:
        (sshd8.workers[2].home / "fail").unlink()
    assert not report.ok
    codes = {r.worker: r.exit_code for r in report.results}
    assert codes.pop("w2") == 1 and set(codes.values()) == {0}


def test_unreachable_worker_is_reported_by_name(sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path)
    sshd8.stop(1)
    try:
        report = exec_command(Context.from_env(), name, ["true"], connect_timeout=1)
    finally:
        sshd8.start(1)
    by_worker = {r.worker: r for r in report.results}
    assert by_worker["w1"].exit_code is None
    assert by_worker["w1"].error.startswith("w1: cannot connect to")
    assert all(r.ok for w, r in by_worker.items() if w != "w1")


def test_host_keys_trusted_on_first_use_then_change_refused(
    sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path
) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path)
    trusted: list[str] = []
    assert exec_command(Context.from_env(), name, ["true"], on_new_host_key=lambda w, fp: trusted.append(w)).ok
    assert sorted(trusted) == [f"w{i}" for i in range(8)]
    known_hosts = (tpuops_home / "clusters" / name / "known_hosts").read_text().splitlines()
    assert len(known_hosts) == 8 and all(line.startswith("[127.") for line in known_hosts)

    trusted.clear()
    assert exec_command(Context.from_env(), name, ["true"], on_new_host_key=lambda w, fp: trusted.append(w)).ok
    assert trusted == []  # known now

    sshd8.new_host_key(5)
    report = exec_command(Context.from_env(), name, ["true"])
    by_worker = {r.worker: r for r in report.results}
    assert by_worker["w5"].exit_code is None and "host key" in by_worker["w5"].error
    assert "changed" in by_worker["w5"].error
    assert all(r.ok for w, r in by_worker.items() if w != "w5")


def test_pinned_host_keys_are_checked(sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path, pin=True)
    before = (tpuops_home / "clusters" / name / "known_hosts").read_text()
    assert exec_command(Context.from_env(), name, ["true"], workers="0-3").ok
    assert (tpuops_home / "clusters" / name / "known_hosts").read_text() == before  # nothing appended

    # A pinned key that is not the worker's: refused, even though the worker was never contacted before.
    other = sshd8.workers[6].host_key_line().split(" ", 1)[1]
    lines = before.splitlines()
    lines[0] = lines[0].split(" ", 1)[0] + " " + other
    (tpuops_home / "clusters" / name / "known_hosts").write_text("\n".join(lines) + "\n")
    report = exec_command(Context.from_env(), name, ["true"], workers="0,1")
    assert [r.ok for r in report.results] == [False, True]
    assert report.results[0].error.startswith("w0: host key of [127.")


def test_hostile_arguments_stay_literal(sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path)
    argv = ["printf", "%s|", *HOSTILE]
    report = exec_command(Context.from_env(), name, argv, workers="3", capture=True)
    assert report.ok
    assert report.results[0].stdout.decode() == "|".join(HOSTILE) + "|"
    env = {"TRICKY": HOSTILE[0] + HOSTILE[3] + HOSTILE[1]}
    access = cluster_access(Context.from_env(), name)
    runners = make_runners(access, access.workers[3:4])
    [result] = exec_all(runners, ["printenv", "TRICKY"], env=env, capture=True)
    assert result.stdout.decode() == env["TRICKY"] + "\n"
    home = sshd8.workers[3].home
    assert not (home / "pwned").exists() and not (home / "pwned2").exists()
    assert sorted(p.name for p in home.iterdir()) in ([], ["mine"])  # nothing removed, nothing created


def test_bad_env_name_and_unknown_worker_are_usage_errors(
    sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path
) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path)
    with pytest.raises(UsageError, match="no worker 9"):
        exec_command(Context.from_env(), name, ["true"], workers="0,9")
    with pytest.raises(UsageError, match="environment variable"):
        exec_all([LocalRunner("w0", tmp_path / "w0")], ["true"], env={"A;rm": "x"})


def test_cli_exec_prefixes_lines_and_prints_table(sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path)
    (sshd8.workers[1].home / "fail").write_text("")
    try:
        done = run_cli("exec", name, "--worker", "0,1", "--", "echo hi; test ! -e ~/fail", timeout=60)
    finally:
        (sshd8.workers[1].home / "fail").unlink()
    assert done.returncode == 1, done.stderr
    assert sorted(done.stdout.splitlines()) == ["[w0] hi", "[w1] hi"], (done.stdout, done.stderr)
    assert "1 of 2 workers failed: w1" in done.stderr

    done = run_cli("exec", name, "--json", "--timeout", "20", "--", "printf", "%s", "; rm -rf ~", timeout=60)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["ok"] and len(data["workers"]) == 8
    assert {w["stdout"] for w in data["workers"]} == {"; rm -rf ~"}


def test_timeout_stops_the_command(sshd8: SshdCluster, tpuops_home: Path, tmp_path: Path) -> None:
    name = make_cluster(sshd8, tpuops_home, tmp_path)
    report = exec_command(Context.from_env(), name, "sleep 30", workers="0", timeout=0.5)
    [result] = report.results
    assert result.exit_code == 124 and "timed out" in result.error


def test_local_runner_quotes_the_same_way(tmp_path: Path) -> None:
    runner = LocalRunner("w0", tmp_path / "w0")
    result = runner.run(["printf", "%s|", *HOSTILE], capture=True)
    assert result.ok and result.stdout.decode() == "|".join(HOSTILE) + "|"
    result = runner.run("echo $HOME; pwd", capture=True)
    assert result.stdout.decode().split() == [str(tmp_path / "w0")] * 2
    assert not (tmp_path / "w0" / "pwned").exists()
