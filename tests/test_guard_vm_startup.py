"""The guard VM's startup script, run in parts in a temporary directory: shellcheck-clean, values quoted, the
bundle mirrored from the bucket with the VM's token (GCS emulator, metadata fake), the wheel installed into a
venv, the systemd unit written. And the wheel of the running tpuops, built once per version and code, by an
interpreter that has nothing but the standard library and tpuops (no setuptools, wheel or pip: a fresh venv's
editable install on Python 3.12, or 3.11's with its old setuptools), from a checkout and from a regular install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import tpuops
from tests.fakes.metadata import MetadataFake
from tests.gcs_emulator import GcsEmulator, gcs_emulator  # noqa: F401  (pytest fixture)
from tests.venvs import make_venv, run_bare
from tpuops.providers import guard_wheel as wheels
from tpuops.providers.guard_startup import GuardBoot, startup_script

WHEEL = f"tpuops-{tpuops.__version__}-py3-none-any.whl"
PREFIX = ".tpuops/night/guard/bundle/"


@pytest.fixture(scope="module")
def metadata() -> Iterator[MetadataFake]:
    with MetadataFake() as fake:
        yield fake


BUILD = """
import importlib.util
from pathlib import Path
seen = [name for name in ("setuptools", "wheel", "pip") if importlib.util.find_spec(name) is not None]
assert not seen, f"not a bare interpreter: it has {seen}"
from tpuops.providers.guard_wheel import running_wheel
print(running_wheel(Path(sys.argv[1])))
"""


def build_bare(path: Path, cache: Path) -> Path:
    """The guard's wheel built as `guard up` builds it, by an interpreter that imports tpuops from `path` and
    has no build tools."""
    done = run_bare(BUILD, [path], str(cache))
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = wheels.source_root()
    assert root is not None, "the suite runs from a checkout"
    return build_bare(root, tmp_path_factory.mktemp("wheels"))


def script_for(tmp_path: Path, bucket: str = "night-bucket", prefix: str = PREFIX) -> Path:
    path = tmp_path / "startup.sh"
    path.write_text(startup_script(GuardBoot("night", bucket, prefix)))
    return path


def run_part(script: Path, home: Path, line: str, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Source the script's functions, point them at a temporary home, run `line`."""
    program = (f'. "$1" && GUARD_HOME="$2" && VENV="$2/venv" && UNIT_DIR="$2/units" && BUNDLE_WAIT=0 && {line}')
    env = {**os.environ, "TPUOPS_GUARD_FUNCTIONS_ONLY": "1", **(env or {})}
    return subprocess.run(["sh", "-c", program, "sh", str(script), str(home)], capture_output=True, text=True,
                          timeout=timeout, cwd=script.parent, env=env)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_the_startup_script_is_shellcheck_clean(tmp_path: Path) -> None:
    done = subprocess.run(["shellcheck", "-s", "sh", str(script_for(tmp_path))], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout


def test_every_value_reaches_the_script_literally(tmp_path: Path) -> None:
    hostile = ".tpuops/night/guard/it's $(touch pwned) `x`/"
    script = script_for(tmp_path, prefix=hostile)
    done = run_part(script, tmp_path, 'printf "%s|%s|%s" "$BUNDLE_PREFIX" "$CLUSTER" "$SERVICE"')
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{hostile}|night|tpuops-guard"
    assert not (tmp_path / "pwned").exists()


def test_values_that_reach_the_systemd_unit_must_be_plain() -> None:
    with pytest.raises(ValueError):
        GuardBoot("night; rm -rf /", "b", PREFIX)
    with pytest.raises(ValueError):
        GuardBoot("night", "b", PREFIX, home="/var/lib/with space")


def test_the_bundle_is_mirrored_with_the_vms_token_and_only_what_changed_is_fetched_again(
        tmp_path: Path, gcs_emulator: GcsEmulator, metadata: MetadataFake) -> None:  # noqa: F811
    bucket = gcs_emulator.client().bucket(gcs_emulator.new_bucket("guard"))
    bucket.blob(PREFIX + "wheels/" + WHEEL).upload_from_string(b"not really a wheel")
    bucket.blob(PREFIX + "wheels/CURRENT").upload_from_string(WHEEL.encode())
    bucket.blob(PREFIX + "clusters/night/state.json").upload_from_string(b'{"name": "night"}')
    bucket.blob(".tpuops/night/guard/lease.json").upload_from_string(b"not the bundle's")
    script = script_for(tmp_path, bucket.name)
    home = tmp_path / "home"
    env = {"GCE_METADATA_HOST": metadata.host, "STORAGE_EMULATOR_HOST": gcs_emulator.host}
    tokens_before = len(metadata.token_requests())

    first = run_part(script, home, "fetch_bundle", env)
    assert first.returncode == 0, first.stderr
    assert (home / "clusters/night/state.json").read_text() == '{"name": "night"}'
    assert (home / "wheels" / WHEEL).read_bytes() == b"not really a wheel"
    assert not (home / "lease.json").exists()
    assert len(metadata.token_requests()) > tokens_before  # it asked the metadata server, as a VM does
    assert (home / "clusters/night/state.json").stat().st_mode & 0o077 == 0  # umask 077

    # What the guard wrote since is kept across a reboot; a bundle staged again replaces it.
    (home / "clusters/night/state.json").write_text('{"name": "night", "restarts": 1}')
    again = run_part(script, home, "fetch_bundle", env)
    assert again.returncode == 0 and "fetched" not in again.stdout
    assert "restarts" in (home / "clusters/night/state.json").read_text()
    bucket.blob(PREFIX + "clusters/night/state.json").upload_from_string(b'{"name": "night", "v": 2}')
    refreshed = run_part(script, home, "fetch_bundle", env)
    assert refreshed.stdout.splitlines()[1:] == ["fetched clusters/night/state.json"]
    assert (home / "clusters/night/state.json").read_text() == '{"name": "night", "v": 2}'

    # A file gone from the bundle goes from the guard's home (not one the guard wrote); listed ones run.
    bucket.blob(PREFIX + "clusters/night/spec/code/old.py").upload_from_string(b"print(1)")
    bucket.blob(PREFIX + "clusters/night/spec/code/run.sh").upload_from_string(b"#!/bin/sh\n")
    bucket.blob(PREFIX + ".executables").upload_from_string(b"clusters/night/spec/code/run.sh\n")
    assert run_part(script, home, "fetch_bundle", env).returncode == 0
    assert (home / "clusters/night/spec/code/run.sh").stat().st_mode & 0o100
    bucket.blob(PREFIX + "clusters/night/spec/code/old.py").delete()
    (home / "clusters/night/notify").write_text("the guard's own")
    assert run_part(script, home, "fetch_bundle", env).returncode == 0
    assert not (home / "clusters/night/spec/code/old.py").exists()
    assert (home / "clusters/night/notify").exists() and (home / "clusters/night/state.json").exists()


def test_an_object_name_that_would_leave_the_guards_home_is_skipped() -> None:
    from tpuops.shipped import guard_fetch_bundle as fetch_bundle

    assert fetch_bundle.safe_path("/h", "clusters/night/state.json") == "/h/clusters/night/state.json"
    for name in ("../escape", "a/../../b", "/etc/passwd", "", "dir/", "a//b", "./x"):
        assert fetch_bundle.safe_path("/h", name) is None, name


def test_a_vm_that_boots_before_the_bundle_is_staged_waits_then_says_what_is_missing(
        tmp_path: Path, gcs_emulator: GcsEmulator, metadata: MetadataFake) -> None:  # noqa: F811
    bucket = gcs_emulator.new_bucket("guard")
    env = {"GCE_METADATA_HOST": metadata.host, "STORAGE_EMULATOR_HOST": gcs_emulator.host}
    done = run_part(script_for(tmp_path, bucket), tmp_path / "home", "fetch_bundle", env)
    assert done.returncode == 1
    assert f"no wheel staged under gs://{bucket}/{PREFIX}wheels/CURRENT yet" in done.stderr


def test_the_wheel_is_installed_into_the_guards_venv_and_runs(tmp_path: Path, built_wheel: Path) -> None:
    home = tmp_path / "home"
    (home / "wheels").mkdir(parents=True)
    shutil.copy(built_wheel, home / "wheels" / WHEEL)
    (home / "wheels/CURRENT").write_text(WHEEL)
    # The dependencies come from the running interpreter's site-packages instead of PyPI: no test may reach the
    # internet.
    make_venv(home / "venv")
    env = {"PIP_NO_INDEX": "1"}
    done = run_part(script_for(tmp_path), home, "install_tpuops", env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "installing " + WHEEL in done.stdout
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as on the VM: no checkout on the path
    version = subprocess.run([str(home / "venv/bin/tpuops"), "--version"], capture_output=True, text=True,
                             timeout=60, env=clean)
    assert tpuops.__version__ in version.stdout
    where = subprocess.run([str(home / "venv/bin/python"), "-c", "import tpuops; print(tpuops.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path, env=clean)
    assert where.stdout.startswith(str(home / "venv")), where  # the wheel's copy, not this machine's
    again = run_part(script_for(tmp_path), home, "install_tpuops", env, timeout=300)
    assert again.returncode == 0 and "installing" not in again.stdout  # same wheel: nothing to do
    for bad in ("../../evil.sh", "tpuops-/../../evil.whl"):
        (home / "wheels/CURRENT").write_text(bad)
        refused = run_part(script_for(tmp_path), home, "install_tpuops", env)
        assert refused.returncode != 0 and "does not name a tpuops wheel" in refused.stdout


def test_the_unit_runs_the_headless_watch_as_the_guard_user_and_restarts_always(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "units").mkdir(parents=True)
    done = run_part(script_for(tmp_path), home, "write_unit")
    assert done.returncode == 0, done.stderr
    unit = (home / "units/tpuops-guard.service").read_text().splitlines()
    assert f"ExecStart={home}/venv/bin/tpuops watch night --headless" in unit
    assert "Restart=always" in unit and "User=tpuops-guard" in unit
    assert f"Environment=HOME={home}" in unit and f"Environment=TPUOPS_HOME={home}" in unit
    assert f"ExecStartPre=/bin/sh -c 'until [ -s {home}/clusters/night/id_ed25519 ]; do sleep 5; done'" in unit


def test_the_wheel_is_built_once_per_version_and_code(tmp_path: Path, built_wheel: Path) -> None:
    assert built_wheel.name == WHEEL
    assert wheels.running_wheel(built_wheel.parent.parent) == built_wheel  # cached: not built again
    # Reproducible: the same code gives the same bytes, so `guard up` again uploads nothing.
    assert wheels.running_wheel(tmp_path / "elsewhere").read_bytes() == built_wheel.read_bytes()
    with zipfile.ZipFile(built_wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"tpuops-{tpuops.__version__}.dist-info/METADATA").decode()
        entry_points = archive.read(f"tpuops-{tpuops.__version__}.dist-info/entry_points.txt").decode()
    assert {"tpuops/cli/main.py", "tpuops/data/catalog.yaml", "tpuops/shipped/start.sh"} <= names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert "Requires-Dist: pydantic>=2.6" in metadata.splitlines()  # what pip on the VM fetches
    assert "tpuops = tpuops.cli.main:main" in entry_points.splitlines()
    root = wheels.source_root()
    assert root is not None
    copy = tmp_path / "tree"
    shutil.copytree(root / "tpuops", copy / "tpuops", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", copy)
    before = wheels.from_checkout(copy).digest()
    (copy / "tpuops" / "cli" / "main.py").write_text((copy / "tpuops/cli/main.py").read_text() + "\n# changed\n")
    changed = wheels.from_checkout(copy).digest()
    assert changed != before
    (copy / "pyproject.toml").write_text((copy / "pyproject.toml").read_text().replace('"rich>=13"', '"rich>=14"'))
    assert wheels.from_checkout(copy).digest() != changed  # a new dependency is a new wheel


def test_a_regular_install_builds_the_same_wheel_without_build_tools(tmp_path: Path, built_wheel: Path) -> None:
    installed = tmp_path / "site-packages"  # `pip install .` puts tpuops there, with its dist-info
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target"]
    subprocess.run([*pip, str(installed), str(built_wheel)], check=True, timeout=120)
    rebuilt = build_bare(installed, tmp_path / "cache")
    assert rebuilt.name == WHEEL and rebuilt.read_bytes() == built_wheel.read_bytes()


def test_a_wheel_that_cannot_be_written_is_one_line_naming_the_file(tmp_path: Path) -> None:
    from tpuops.errors import TpuopsError

    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache's directory goes")
    with pytest.raises(TpuopsError) as caught:
        wheels.running_wheel(blocked)
    assert caught.value.message.startswith("could not build the tpuops wheel for the guard: [Errno ")
    assert str(blocked) in caught.value.message and "\n" not in caught.value.message


def test_the_whole_script_runs_in_order_with_the_system_tools_stubbed(
        tmp_path: Path, built_wheel: Path, gcs_emulator: GcsEmulator, metadata: MetadataFake) -> None:  # noqa: F811
    """main(): python3-venv present, the guard's user made, the bundle fetched, the wheel installed, the home
    handed to the user, the unit written and the service enabled and restarted."""
    bucket = gcs_emulator.client().bucket(gcs_emulator.new_bucket("guard"))
    bucket.blob(PREFIX + "wheels/" + WHEEL).upload_from_filename(str(built_wheel))
    bucket.blob(PREFIX + "wheels/CURRENT").upload_from_string(WHEEL.encode())
    home, stubs, calls = tmp_path / "home", tmp_path / "stubs", tmp_path / "calls"
    stubs.mkdir()
    for tool in ("useradd", "chown", "systemctl", "apt-get"):
        (stubs / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        (stubs / tool).chmod(0o755)
    (stubs / "id").write_text("#!/bin/sh\nexit 1\n")  # the guard's user does not exist yet
    (stubs / "id").chmod(0o755)
    make_venv(home / "venv")
    (home / "units").mkdir()
    env = {"GCE_METADATA_HOST": metadata.host, "STORAGE_EMULATOR_HOST": gcs_emulator.host, "PIP_NO_INDEX": "1",
           "PATH": f"{stubs}:{os.environ['PATH']}"}
    done = run_part(script_for(tmp_path, bucket.name), home, "main", env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [
        f"useradd --system --home-dir {home} --shell /usr/sbin/nologin tpuops-guard",
        f"chown -R tpuops-guard:tpuops-guard {home}",
        "systemctl daemon-reload",
        "systemctl enable tpuops-guard",
        "systemctl restart tpuops-guard",
    ]
    assert (home / "units/tpuops-guard.service").is_file() and (home / "venv/bin/tpuops").is_file()
