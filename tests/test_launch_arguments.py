"""Arguments after `--` reach the worker exactly as given, on real sshd workers: launch (and the relaunch that
watch makes from the recorded command), exec and ssh. Hostile strings stay literal: no command substitution,
no second command, no word splitting. One argument stays a shell line, as documented."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available
from tpuops.context import Context
from tpuops.ops.remote import ssh_argv

pytestmark = [
    pytest.mark.skipif(not sshd_available(), reason="needs root and OpenSSH sshd"),
    pytest.mark.usefixtures("tpu_paths_in_worker_homes"),
]

SPEC = """
name: args
zone: europe-west4-a
tpu: {type: v3-16}
bucket: {name: args-bucket}
code: {path: code}
trainer:
  framework: jax
  command: python3 argv.py default
"""
ARGV_PRINTER = "import json, sys\nprint('ARGV=' + json.dumps(sys.argv[1:]))\n"


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    with SshdCluster(tmp_path_factory.mktemp("sshd-args"), 2) as cluster:
        yield cluster


@pytest.fixture
def cluster(sshd2: SshdCluster, tpuops_home: Path, tmp_path: Path) -> str:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "argv.py").write_text(ARGV_PRINTER)
    sshd2.write_cluster(tpuops_home, "args", write_spec(tmp_path, SPEC), pin=True)
    return "args"


def hostile(tmp_path: Path) -> list[str]:
    """The user's case: a command substitution, a second command, words with blanks, quotes and a glob."""
    return [f"$(touch {tmp_path}/pwned)", "a; echo INJECTED", "two words", "it's \"quoted\"", "*", "`id`", ""]


def argvs(output: str) -> list[list[str]]:
    return [json.loads(line.split("ARGV=", 1)[1]) for line in output.splitlines() if "ARGV=" in line]


def test_launch_passes_each_argument_as_given(cluster: str, tmp_path: Path) -> None:
    args = hostile(tmp_path)
    done = run_cli("launch", cluster, "--follow", "--", "python3", "argv.py", *args, timeout=120)
    assert done.returncode == 0, done.stderr
    assert argvs(done.stdout) == [args, args]  # both workers, exactly as given
    assert "INJECTED" not in done.stdout.replace("a; echo INJECTED", "")
    assert not (tmp_path / "pwned").exists()
    # watch relaunches from the recorded command: it must mean the same argv again
    recorded = Context.from_env().store.require(cluster).current_run.command
    assert shlex.split(recorded) == ["python3", "argv.py", *args]


def test_launch_with_one_argument_runs_it_as_a_shell_line(cluster: str) -> None:
    done = run_cli("launch", cluster, "--follow", "--", "python3 argv.py x | tr x y", timeout=120)
    assert done.returncode == 0, done.stderr
    assert argvs(done.stdout) == [["y"], ["y"]]


def test_exec_passes_each_argument_as_given(cluster: str, sshd2: SshdCluster, tmp_path: Path) -> None:
    printer = sshd2.workers[0].home / "argv_exec.py"
    printer.write_text(ARGV_PRINTER)
    args = hostile(tmp_path)
    done = run_cli("exec", cluster, "--worker", "0", "--", "python3", str(printer), *args, timeout=60)
    assert done.returncode == 0, done.stderr
    assert argvs(done.stdout) == [args]
    assert not (tmp_path / "pwned").exists()


def test_ssh_passes_each_argument_as_given(cluster: str, sshd2: SshdCluster, tmp_path: Path) -> None:
    printer = sshd2.workers[1].home / "argv_ssh.py"
    printer.write_text(ARGV_PRINTER)
    args = hostile(tmp_path)
    argv = ssh_argv(Context.from_env(), cluster, worker=1, command=["python3", str(printer), *args])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert argvs(done.stdout) == [args]
    assert not (tmp_path / "pwned").exists()
