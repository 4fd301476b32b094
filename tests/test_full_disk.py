"""A full disk: `status` still answers (it needs to write nothing), and a command that must write says the disk is
full and where, in one line, instead of `unexpected OSError`. TPUOPS_HOME lives on a small tmpfs filled up."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tpuops.cli.errors import render_error


@pytest.fixture(scope="module")
def full_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A 4 MB tmpfs holding TPUOPS_HOME with a local cluster and one finished run; then filled to the brim."""
    mount = tmp_path_factory.mktemp("full-disk")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        home = mount / "home"
        spec = write_spec(tmp_path_factory.mktemp("full-disk-spec"), """
            name: fulldisk
            provider: local
            tpu: {type: v2-8, workers: 1}
            trainer: {framework: jax, command: 'echo hi'}
            """)
        env = {"TPUOPS_HOME": str(home)}
        assert run_cli("up", str(spec), env=env).returncode == 0
        launched = run_cli("launch", "fulldisk", "--follow", env=env)
        assert launched.returncode == 0, launched.stderr
        with open(mount / "filler", "wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError as err:
                assert err.errno == errno.ENOSPC
        yield home, spec
    finally:
        run_cli("down", "fulldisk", "--yes", env={"TPUOPS_HOME": str(mount / "home")})
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_status_answers_on_a_full_disk(full_home: tuple[Path, Path]) -> None:
    home, _ = full_home
    result = run_cli("status", "fulldisk", env={"TPUOPS_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert "w0: exited 0" in result.stdout


def test_a_command_that_must_write_says_the_disk_is_full_and_where(full_home: tuple[Path, Path]) -> None:
    home, _ = full_home
    result = run_cli("launch", "fulldisk", env={"TPUOPS_HOME": str(home)})
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"tpuops: error: {home}/") and "cannot be written: the disk is full" in line, line
    assert "unexpected" not in line and "df -h" in line


def test_a_full_disk_without_a_file_name_names_where_tpuops_writes(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("TPUOPS_HOME", str(tmp_path))
    line, code = render_error(OSError(errno.ENOSPC, "No space left on device"))
    assert code == 1 and line.startswith("tpuops: error: the disk is full: no space left to write")
    assert str(tmp_path) in line and "unexpected" not in line
