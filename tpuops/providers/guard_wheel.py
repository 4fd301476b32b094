"""The wheel of the tpuops that is running, so the guard VM runs the same version as the user.

A wheel is a zip of the package's files plus a `.dist-info` directory (METADATA, WHEEL, entry_points.txt,
RECORD), so it is written here with the standard library alone: no `pip wheel`, setuptools or `wheel` package and
no network. That is what makes it work from every install the README describes: an editable install in a fresh
venv (Python 3.11's venv has setuptools 65 and no `wheel`, 3.12's has no setuptools), a regular install, offline.
A wheel rather than the source tree because pip on the VM installs a wheel without any build tool of its own.

The files are those of the running tpuops package (its modules and package data, without caches). The metadata
comes from pyproject.toml when tpuops runs from a checkout (an editable install, or PYTHONPATH), else from the
installed distribution's dist-info. The zip is reproducible (sorted entries, fixed timestamps) and cached under
TPUOPS_HOME/cache/wheels, keyed by the version and a digest of the content, so an unchanged tpuops is built once
and a changed checkout is not served stale.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import stat
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tpuops
from tpuops.errors import TpuopsError

DIST = "tpuops"
TAG = "py3-none-any"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: the same code gives the same bytes
FAILED = "could not build the tpuops wheel for the guard"


@dataclass(frozen=True)
class WheelSource:
    """What goes into the wheel: the package directory's files and the distribution's metadata."""

    name: str
    version: str
    package: Path  # the directory of the tpuops package
    metadata: str  # the text of METADATA
    entry_points: str  # the text of entry_points.txt ("" for none)

    @property
    def wheel_name(self) -> str:
        return f"{self.name}-{self.version}-{TAG}.whl"

    def entries(self) -> list[tuple[str, bytes, bool]]:
        """(name in the archive, content, executable) of every file but RECORD, in archive order."""
        found = [(f"{self.package.name}/{path.relative_to(self.package).as_posix()}", path.read_bytes(),
                  bool(path.stat().st_mode & 0o111)) for path in package_files(self.package)]
        info = f"{self.name}-{self.version}.dist-info"
        wheel = f"Wheel-Version: 1.0\nGenerator: tpuops providers/guard_wheel.py\nRoot-Is-Purelib: true\nTag: {TAG}\n"
        found += [(f"{info}/METADATA", self.metadata.encode(), False), (f"{info}/WHEEL", wheel.encode(), False)]
        if self.entry_points:
            found.append((f"{info}/entry_points.txt", self.entry_points.encode(), False))
        return found

    def digest(self) -> str:
        digest = hashlib.sha256()
        for name, data, executable in self.entries():
            digest.update(f"{name}\0{int(executable)}\0{len(data)}\0".encode() + data)
        return digest.hexdigest()


def running_wheel(cache: Path) -> Path:
    """A wheel of exactly the tpuops that runs now, built once per version and content."""
    source = running_source()
    try:
        return _cached(cache / f"{source.version}-{source.digest()[:16]}", lambda out: build_wheel(source, out))
    except OSError as err:
        raise TpuopsError(f"{FAILED}: {err}", f"the error names the file: make it readable, or {cache} a "
                                              "directory you can write") from None


def running_source() -> WheelSource:
    """The running tpuops as a checkout, or else as the installed distribution its files belong to."""
    root = source_root()
    if root is not None:
        return from_checkout(root)
    running = Path(tpuops.__file__).resolve()
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is None or Path(str(dist.locate_file(f"{DIST}/__init__.py"))).resolve() != running:
        raise TpuopsError(f"{FAILED}: the running tpuops ({running.parent}) is neither a checkout with its "
                          "pyproject.toml nor an installed distribution",
                          "install it as the README says (`pip install -e .` in the checkout)")
    return from_installed(dist)


def source_root() -> Path | None:
    """The project directory of the running tpuops when it runs from source, else None."""
    root = Path(tpuops.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "tpuops"' in pyproject.read_text():
        return root
    return None


def from_checkout(root: Path) -> WheelSource:
    project = project_table(root / "pyproject.toml")
    name = str(project.get("name", DIST))
    version = str(project.get("version") or tpuops.__version__)
    return WheelSource(name, version, root / DIST, metadata_text(project, name, version),
                       entry_points_text(project))


def from_installed(dist: importlib.metadata.Distribution) -> WheelSource:
    metadata = dist.read_text("METADATA")
    if metadata is None:
        raise TpuopsError(f"{FAILED}: the installed tpuops has no METADATA", "reinstall tpuops with pip")
    return WheelSource(dist.metadata["Name"], dist.version, Path(str(dist.locate_file(DIST))), metadata,
                       dist.read_text("entry_points.txt") or "")


def package_files(package: Path) -> list[Path]:
    """The package's modules and data: every file under it but byte code and hidden files, sorted."""
    return sorted(path for path in package.rglob("*") if path.is_file()
                  and "__pycache__" not in path.relative_to(package).parts
                  and path.suffix not in (".pyc", ".pyo") and not path.name.startswith("."))


def project_table(pyproject: Path) -> Mapping[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: tomli, which pip and pytest bring there
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise TpuopsError(f"{FAILED}: reading {pyproject} needs Python 3.11 or the tomli package",
                              "`pip install tomli`") from None
    try:
        project = tomllib.loads(pyproject.read_text()).get("project")
    except (OSError, ValueError) as err:
        raise TpuopsError(f"{FAILED}: {pyproject}: {err}", "fix pyproject.toml (or `git checkout` it)") from None
    if not isinstance(project, dict):
        raise TpuopsError(f"{FAILED}: {pyproject} has no [project] table", "fix pyproject.toml")
    return project


def metadata_text(project: Mapping[str, Any], name: str, version: str) -> str:
    """Core metadata 2.1 of what pip on the VM needs: the name, the version and the dependencies to fetch."""
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if isinstance(project.get("license"), dict) and project["license"].get("text"):
        lines.append(f"License: {project['license']['text']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {requirement}" for requirement in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {for_extra(requirement, extra)}" for requirement in requirements]
    return "\n".join(lines) + "\n"


def for_extra(requirement: str, extra: str) -> str:
    base, _, marker = requirement.partition(";")
    condition = f'extra == "{extra}"'
    return f"{base.strip()}; ({marker.strip()}) and {condition}" if marker.strip() else f"{base.strip()}; {condition}"


def entry_points_text(project: Mapping[str, Any]) -> str:
    groups: dict[str, Mapping[str, str]] = {}
    if project.get("scripts"):
        groups["console_scripts"] = project["scripts"]
    if project.get("gui-scripts"):
        groups["gui_scripts"] = project["gui-scripts"]
    groups.update(project.get("entry-points", {}))
    return "".join(f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items()) + "\n"
                   for group, entries in groups.items())


def build_wheel(source: WheelSource, out: Path) -> Path:
    """Write the wheel of `source` into the directory `out`; its path."""
    wheel = out / source.wheel_name
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data, executable in source.entries():
            _add(archive, name, data, executable)
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([name, f"sha256={sha}", len(data)])
        record_name = f"{source.name}-{source.version}.dist-info/RECORD"
        writer.writerow([record_name, "", ""])
        _add(archive, record_name, record.getvalue().encode(), False)
    return wheel


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool) -> None:
    info = zipfile.ZipInfo(name, ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16  # pip keeps the exec bit
    archive.writestr(info, data)


def _cached(directory: Path, build: Callable[[Path], Path]) -> Path:
    found = sorted(directory.glob("*.whl")) if directory.is_dir() else []
    if found:
        return found[0]
    directory.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the cache and moved in whole: a crash or a concurrent build never leaves half a wheel there.
    with tempfile.TemporaryDirectory(dir=directory.parent, prefix=".building-") as scratch:
        wheel = build(Path(scratch))
        directory.mkdir(exist_ok=True)
        target = directory / wheel.name
        if not target.exists():
            wheel.replace(target)
    return target
