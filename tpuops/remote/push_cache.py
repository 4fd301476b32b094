"""The push's cache on this machine, one folder per destination: the manifests of trees pushed there (the bases
of later diffs, so a worker need not be asked for its manifest) and the file hashes of the source (so unchanged
large files are not read again), and what keeps that folder small."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

from tpuops.atomic import write_atomic
from tpuops.remote.manifest import Manifest, scan_tree

KEPT_MANIFESTS = 16  # manifests of earlier trees kept in the cache (the bases of later pushes)
STALE_TEMP_SECONDS = 600  # a temporary file this old in the cache belongs to a write that died


def cached_manifest(cache_dir: Path, tree: str) -> Manifest | None:
    path = cache_dir / f"{tree}.json"
    return Manifest.from_text(path.read_text()) if path.exists() else None


def remember_manifest(cache_dir: Path, tree: str, text: str) -> None:
    write_atomic(cache_dir / f"{tree}.json", text)


def scan_with_cached_hashes(cache_dir: Path, source: Path, exclude: Sequence[str]) -> Manifest:
    """The source's manifest, with the file hashes of the last scan of this source, so unchanged big files are
    not read again."""
    path = cache_dir / f"hashes-{hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]}.json"
    hashes = read_json(path) if source.is_dir() else None
    manifest = scan_tree(source, exclude, hashes)
    if hashes is not None:
        write_json(path, hashes)
    return manifest


def sweep_cache(cache_dir: Path) -> None:
    """Remove what does not belong in a push cache: payload files an earlier version built here (one killed
    mid-push left hundreds of MB), temporary files of writes that died (after a while: one may be under way),
    and the manifests of all but the latest trees."""
    now = time.time()
    manifests = []
    for path in cache_dir.iterdir():
        try:
            age = now - path.stat().st_mtime
        except FileNotFoundError:
            continue  # a concurrent push's temporary file, gone already
        if path.name.startswith("payload-") or (path.suffix == ".tmp" and age > STALE_TEMP_SECONDS):
            path.unlink(missing_ok=True)
        elif path.suffix == ".json" and not path.name.startswith("hashes-"):
            manifests.append((age, path))
    for _, path in sorted(manifests)[KEPT_MANIFESTS:]:
        path.unlink(missing_ok=True)


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data))

