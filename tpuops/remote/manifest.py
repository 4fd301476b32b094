"""The client's view of a tree to push: its manifest (path, size, mode, sha256, symlink; the hash of the
manifest text is the tree id), and the diff against a worker's tree (`payload.py` builds the tar that carries it).
Used by `sync.py` (the push itself) and by `check` (which scans the same files).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pathspec

from tpuops.errors import UsageError
from tpuops.shipped.push_protocol import manifest_text, tree_id

IGNORE_FILE = ".tpuopsignore"
ALWAYS_EXCLUDED = [".git/", "__pycache__/", IGNORE_FILE]
HASH_CHUNK = 1024 * 1024
PARALLEL_HASH_BYTES = 16 * 1024 * 1024  # below this, hashing in threads costs more than it saves


# ------------------------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, "/"-separated
    size: int
    mode: int  # 0o755 or 0o644: only the executable bit travels
    digest: str  # sha256 of the content ("" for symlinks)
    link: str | None = None  # symlink target, kept as a link

    def as_row(self) -> list[object]:
        return [self.path, self.size, self.mode, self.digest, self.link]


@dataclass(frozen=True)
class Manifest:
    entries: tuple[FileEntry, ...]

    @cached_property  # a frozen dataclass's cached_property: computed once (2,000 files: ~5 ms each time)
    def text(self) -> str:
        return manifest_text([e.as_row() for e in self.entries])

    @cached_property
    def tree_id(self) -> str:
        return tree_id(self.text)

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def by_path(self) -> dict[str, FileEntry]:
        return {e.path: e for e in self.entries}

    @classmethod
    def from_text(cls, text: str) -> Manifest:
        rows = json.loads(text)["files"]
        return cls(tuple(FileEntry(r[0], r[1], r[2], r[3], r[4]) for r in rows))


def ignore_spec(root: Path, exclude: Sequence[str]) -> pathspec.PathSpec:
    """gitignore-style patterns from the spec's `code.exclude` plus the tree's own `.tpuopsignore`; a pattern
    git would refuse (a lone `!`, a trailing `\\`) is a UsageError naming where it is written."""
    sources = [(f"code.exclude[{index}]", pattern) for index, pattern in enumerate(exclude)]
    ignore_file = root / IGNORE_FILE
    if ignore_file.is_file():
        sources += [(f"{ignore_file}:{number}", line) for number, line in enumerate(_ignore_lines(ignore_file), 1)]
    for where, pattern in sources:
        try:
            pathspec.GitIgnoreSpec.from_lines([pattern])
        except ValueError as err:  # pathspec's GitIgnorePatternError
            raise UsageError(f"{where}: {pattern!r} is not a valid gitignore pattern ({err})",
                             "escape a leading ! or # with a backslash, or remove the line") from None
    return pathspec.GitIgnoreSpec.from_lines([*ALWAYS_EXCLUDED, *(pattern for _, pattern in sources)])


def check_ignore_patterns(root: Path, exclude: Sequence[str]) -> None:
    """Before anything is created: the ignore patterns a push of `root` will use are valid (UsageError if not)."""
    if root.is_dir():
        ignore_spec(root, exclude)


def _ignore_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise UsageError(f"{path} is not UTF-8 text (byte offset {err.start})", "an ignore file is text") from None
    except OSError as err:
        raise UsageError(f"{path} cannot be read: {err.strerror}", "check its owner and mode") from None


def scan_tree(root: Path, exclude: Sequence[str] = (), cache: dict[str, list] | None = None) -> Manifest:
    """Manifest of everything under `root` not excluded. `cache` maps path -> [size, mtime_ns, digest]
    from an earlier scan, so unchanged large files are not re-read (it is updated in place)."""
    if root.is_file():
        return _manifest([(str(root), root.name)], cache)
    if not root.is_dir():
        raise UsageError(f"{root} does not exist", "check `code.path` / `data[].from` in the spec")
    spec = ignore_spec(root, exclude)
    found: list[tuple[str, str]] = []
    folders = [(str(root), "")]
    while folders:  # os.scandir and plain strings: a second push of 2,000 unchanged files is mostly this loop
        folder, rel_dir = folders.pop()
        try:
            listing = os.scandir(folder)
        except OSError:
            continue  # as os.walk did: a folder that cannot be listed is left out
        with listing:
            for item in listing:
                rel = rel_dir + item.name
                if item.is_dir(follow_symlinks=False):  # a symlink to a directory travels as a symlink
                    if not spec.match_file(rel + "/"):
                        folders.append((item.path, rel + "/"))
                elif not spec.match_file(rel):
                    found.append((item.path, rel))
    return _manifest(found, cache)


def _manifest(found: Sequence[tuple[str, str]], cache: dict[str, list] | None) -> Manifest:
    """Entries for (path, relative path) pairs: digests from the cache where size and mtime match, the others
    hashed, several files at once when there is much to read (hashlib lets go of the GIL)."""
    entries: list[FileEntry] = []
    unhashed: list[tuple[str, str, os.stat_result, int]] = []
    for path, rel in found:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            entries.append(FileEntry(rel, 0, 0o777, "", os.readlink(path)))
            continue
        if not stat.S_ISREG(info.st_mode):
            continue  # sockets, fifos, devices: not code
        mode = 0o755 if info.st_mode & stat.S_IXUSR else 0o644
        cached = cache.get(rel) if cache is not None else None
        if cached and cached[0] == info.st_size and cached[1] == info.st_mtime_ns:
            entries.append(FileEntry(rel, info.st_size, mode, cached[2]))
        else:
            unhashed.append((path, rel, info, mode))
    paths = [path for path, _, _, _ in unhashed]
    if sum(info.st_size for _, _, info, _ in unhashed) < PARALLEL_HASH_BYTES:
        digests = [_sha256(path) for path in paths]
    else:
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="tpuops-hash") as pool:
            digests = list(pool.map(_sha256, paths))
    for (_, rel, info, mode), digest in zip(unhashed, digests, strict=True):
        entries.append(FileEntry(rel, info.st_size, mode, digest))
        if cache is not None:
            cache[rel] = [info.st_size, info.st_mtime_ns, digest]
    return Manifest(tuple(sorted(entries, key=lambda e: e.path)))


def _sha256(path: str) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def changed_entries(new: Manifest, base: Manifest | None) -> list[FileEntry]:
    """Regular files of `new` whose content or mode differs from `base` (symlinks are rebuilt remotely)."""
    old = base.by_path() if base else {}
    changed = []
    for entry in new.entries:
        if entry.link is not None:
            continue
        before = old.get(entry.path)
        if before is None or before.link is not None or (before.digest, before.mode) != (entry.digest, entry.mode):
            changed.append(entry)
    return changed


# -------------------------------------------------------------------------------------------- payload


def manifest_delta(new: Manifest, base: Manifest | None, base_id: str | None) -> dict[str, object]:
    """What the worker needs besides file bodies to rebuild `new` from `base`: rows to set, paths to delete."""
    old = base.by_path() if base else {}
    current = new.by_path()
    return {
        "base": base_id,
        "tree": new.tree_id,
        "set": [e.as_row() for e in new.entries if old.get(e.path) != e],
        "delete": sorted(set(old) - set(current)),
        "sent": [e.path for e in changed_entries(new, base)],
    }
