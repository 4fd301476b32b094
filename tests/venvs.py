"""Interpreters for tests that install something or must not see what the suite has installed.

The suite runs from a venv (as the README's test command does) or from a base interpreter, so a test never
assumes the base interpreter holds the dependencies (`--system-site-packages` reaches the base, not the venv the
suite runs from). A venv made here sees the running interpreter's installed distributions through a .pth file
instead: pip finds the dependencies installed there without an index, and nothing reaches the internet.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

PTH = "tpuops-tests-running-interpreter.pth"


def make_venv(path: Path, *, with_pip: bool = True, running_packages: bool = True,
              base: Path | None = None) -> Path:
    """A venv at `path`, made by `base` (the running interpreter by default) without system site-packages; its
    python. With `running_packages`, it imports what the running interpreter has installed (after its own)."""
    argv = [str(base or sys.executable), "-m", "venv", *([] if with_pip else ["--without-pip"]), str(path)]
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    python = path / "bin" / "python"
    if running_packages:
        purelib = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 check=True, capture_output=True, text=True, timeout=60).stdout.strip()
        Path(purelib, PTH).write_text("".join(f"{directory}\n" for directory in running_site_dirs()))
    return python


def running_site_dirs() -> list[str]:
    """Where the running interpreter's installed distributions are (a venv's site-packages, or the base's)."""
    found = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    return [directory for directory in dict.fromkeys(found) if os.path.isdir(directory)]


BARE_FLAGS = ("-I", "-S", "-B")  # no PYTHONPATH or user site, no site-packages, no byte code written


def run_bare(code: str, path: list[Path], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`code` in the running interpreter with only the standard library and `path` importable: what a fresh venv
    without setuptools, wheel or pip would import."""
    program = f"import sys\nsys.path[:0] = {[str(p) for p in path]!r}\n{code}"
    return subprocess.run([sys.executable, *BARE_FLAGS, "-c", program, *args], capture_output=True, text=True,
                          timeout=timeout)


def script_wheel(directory: Path, name: str, version: str, script: str, content: bytes) -> Path:
    """A wheel of distribution `name` that installs one executable, `script`, into the environment's bin
    directory (as py-spy's wheel does): what a test's pip installs from a local directory instead of PyPI."""
    import base64
    import hashlib
    import zipfile

    stem = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{stem}.data/scripts/{script}": content,
        f"{stem}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{stem}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{stem}.dist-info/RECORD,,\n"
    wheel = directory / f"{stem}-py3-none-any.whl"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in {**files, f"{stem}.dist-info/RECORD": record.encode()}.items():
            info = zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if "/scripts/" in path else 0o100644) << 16  # pip keeps the exec bit
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return wheel
