"""The wheel of the tpuops that is running, so the guard VM runs the same version as the user.

From a source tree (a checkout, an editable install) the wheel is built with `pip wheel --no-deps` from a copy
of the tree (nothing is written into the user's checkout); from an installed wheel it is packed again from the
installed files its RECORD lists. Either way it is cached under TPUOPS_HOME/cache/wheels, keyed by the version
and a digest of the code, so an unchanged tpuops is built once and a changed checkout is not served stale.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import tpuops
from tpuops.errors import TpuopsError

DIST = "tpuops"
BUILD_TIMEOUT = 300.0
SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE", "setup.py", "setup.cfg", "MANIFEST.in")


def source_root() -> Path | None:
    """The project directory of the running tpuops when it runs from source, else None."""
    root = Path(tpuops.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "tpuops"' in pyproject.read_text():
        return root
    return None


def running_wheel(cache: Path) -> Path:
    """A wheel of exactly the tpuops that runs now, built once per version and code."""
    root = source_root()
    if root is not None:
        key = f"{tpuops.__version__}-{source_digest(root)[:16]}"
        return _cached(cache / key, lambda out: build_from_source(root, out))
    dist = importlib.metadata.distribution(DIST)
    key = f"{dist.version}-{hashlib.sha256((dist.read_text('RECORD') or '').encode()).hexdigest()[:16]}"
    return _cached(cache / key, lambda out: repack_installed(dist, out))


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


def source_digest(root: Path) -> str:
    digest = hashlib.sha256()
    paths = [root / name for name in SOURCE_FILES if (root / name).is_file()]
    paths += sorted(p for p in (root / "tpuops").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in paths:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_from_source(root: Path, out: Path) -> Path:
    tree = out / "tree"
    tree.mkdir()
    for name in SOURCE_FILES:
        if (root / name).is_file():
            shutil.copy2(root / name, tree / name)
    shutil.copytree(root / "tpuops", tree / "tpuops", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = out / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
               "--quiet", "-w", str(wheels), str(tree)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise TpuopsError(f"building the tpuops wheel took over {BUILD_TIMEOUT:.0f}s") from None
    found = sorted(wheels.glob("tpuops-*.whl"))
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise TpuopsError(f"could not build the tpuops wheel for the guard: {last}",
                          "`pip install setuptools wheel` (the build runs offline, without isolation)")
    return found[0]


def repack_installed(dist: importlib.metadata.Distribution, out: Path) -> Path:
    """The installed files of `dist` as a wheel again: what RECORD lists inside site-packages, with a new RECORD
    (scripts and caches outside it are left out: pip writes the console script again on install)."""
    files = [f for f in dist.files or [] if not str(f).startswith("..") and "__pycache__" not in f.parts
             and f.suffix != ".pyc" and f.name not in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")]
    dist_info = next((f.parts[0] for f in files if f.parts[0].endswith(".dist-info")), None)
    if dist_info is None:
        raise TpuopsError("the installed tpuops has no dist-info to build the guard's wheel from",
                          "reinstall tpuops with pip")
    wheel = out / f"{dist.metadata['Name']}-{dist.version}-py3-none-any.whl"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for file in files:
            data = Path(str(dist.locate_file(file))).read_bytes()
            archive.writestr(str(file), data)
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([str(file), f"sha256={sha}", len(data)])
        writer.writerow([f"{dist_info}/RECORD", "", ""])
        archive.writestr(f"{dist_info}/RECORD", record.getvalue())
    return wheel
