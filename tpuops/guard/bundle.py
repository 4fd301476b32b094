"""What a guard VM runs from: `guard up` stages under gs://BUCKET/.tpuops/NAME/guard/bundle/ the files the VM
mirrors into its TPUOPS_HOME (shipped/guard_fetch_bundle.py), with paths that make sense there:

    clusters/NAME/state.json         the cluster's state; spec_path names the staged spec on the VM
    clusters/NAME/known_hosts        the workers' pinned host keys
    clusters/NAME/id_ed25519.pub     the public half only: the private key goes over SSH (providers/gcp_guard_host.py)
    clusters/NAME/spec/tpuops.yaml   the spec, code.path and data[].from pointing at the staged copies, and
                                     without guard.notify (a secret: it goes over SSH too, to a 0600 file)
    clusters/NAME/spec/code/...      the code a relaunch pushes (code.path without code.exclude)
    clusters/NAME/spec/data/K/...    data[K] whose `to` is a path on the workers (a re-created TPU's disks are
                                     empty, so a relaunch pushes it again)
    .executables                     the staged files with an executable bit (GCS keeps no file modes)

data[] going to gs:// is not staged: the launch that started the run uploaded it and the bucket outlives a
preemption; the staged spec leaves those entries out, so a relaunch on the guard does not look for them.
Objects whose size and CRC32C already match are not uploaded again, and staged files gone from the laptop are
deleted, so `guard up` again refreshes a changed spec or code and leaves the rest alone. The staged spec keeps
trainer.env as written (the bucket is the run's own, which the workers read too).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tpuops import keys
from tpuops.cloud.blob_types import BlobInfo, BlobStore
from tpuops.cloud.blobs import crc32c_of_bytes, same_content
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.remote.manifest import scan_tree
from tpuops.spec import Spec, parse_spec, read_spec_text
from tpuops.state import ClusterState

SPEC_DIR, SPEC_FILE = "spec", "tpuops.yaml"
EXECUTABLES = ".executables"  # read by shipped/guard_fetch_bundle.py: one bundle-relative path per line


@dataclass(frozen=True)
class StagedBundle:
    uploaded: int  # objects written (changed or new)
    unchanged: int
    deleted: int  # objects of files no longer there


def staged_spec_path(home: str, cluster: str) -> str:
    return f"{home}/clusters/{cluster}/{SPEC_DIR}/{SPEC_FILE}"


def stage_bundle(ctx: Context, state: ClusterState, spec: Spec | None, store: BlobStore, home: str) -> StagedBundle:
    """Stage (or refresh) the bundle in `store` for a guard whose TPUOPS_HOME is `home`."""
    if spec is None:
        raise UsageError(f"the spec of '{state.name}' at {state.spec_path} cannot be read, and a guard VM runs "
                         "from a copy of it", f"put the spec back, or `tpuops up SPEC` again for '{state.name}'")
    cluster = state.name
    base = f"clusters/{cluster}/"
    spec_dir = Path(state.spec_path).resolve().parent
    files: dict[str, Path] = {}  # bundle name -> local file
    executables: list[str] = []
    code_prefix = f"{base}{SPEC_DIR}/code/"
    _add_tree(files, executables, spec_dir / spec.code.path, spec.code.exclude, code_prefix)
    staged_data: list[dict[str, str]] = []
    for index, item in enumerate(spec.data):
        if item.to.startswith("gs://"):
            continue
        source = spec_dir / Path(item.from_).expanduser()
        _add_tree(files, executables, source, (), f"{base}{SPEC_DIR}/data/{index}/")
        relative = f"data/{index}" if source.is_dir() else f"data/{index}/{source.name}"
        staged_data.append({"from": relative, "to": item.to})
    cluster_dir = ctx.store.cluster_dir(cluster)
    for name in (keys.KNOWN_HOSTS, keys.PRIVATE_KEY + ".pub"):
        if (cluster_dir / name).is_file():
            files[base + name] = cluster_dir / name
    blobs = {
        f"{base}{SPEC_DIR}/{SPEC_FILE}": staged_spec_text(state, staged_data),
        f"{base}state.json": staged_state(state, home),
        EXECUTABLES: "".join(f"{name}\n" for name in sorted(executables)).encode(),
    }
    return _sync(store, files, blobs, owned=(base, EXECUTABLES))


def remove_bundle(store: BlobStore) -> int:
    """Every object of the bundle (the staged files and the wheels beside them); how many there were."""
    names = [info.name for info in store.list("")]
    for name in names:
        store.delete(name)
    return len(names)


def staged_state(state: ClusterState, home: str) -> bytes:
    """The state as the guard reads it on the VM (it holds no secret: see state.py), without the guard VM itself:
    the guard's copy never looks for a guard of its own (access/guard_state.py)."""
    copy = state.model_copy(deep=True)
    copy.spec_path = staged_spec_path(home, state.name)
    copy.drop_resource("guard_vm")
    return json.dumps(copy.model_dump(mode="json"), indent=2).encode()


def staged_spec_text(state: ClusterState, staged_data: list[dict[str, str]]) -> bytes:
    """The user's spec with the paths of the staged copies, and without the webhook."""
    raw: dict[str, Any] = yaml.safe_load(read_spec_text(Path(state.spec_path))) or {}
    raw["code"] = {**(raw.get("code") or {}), "path": "code"}
    if staged_data:
        raw["data"] = staged_data
    else:
        raw.pop("data", None)
    if isinstance(raw.get("guard"), dict):
        raw["guard"] = {key: value for key, value in raw["guard"].items() if key != "notify"}
    text = yaml.safe_dump(raw, sort_keys=False)
    parse_spec(text, f"the staged copy of {state.spec_path}")  # still a valid spec (raises SpecError if not)
    return text.encode()


def _add_tree(files: dict[str, Path], executables: list[str], source: Path, exclude: Sequence[str],
              prefix: str) -> None:
    """The files under `source` (or the one file) as bundle names under `prefix`; symlinks are staged as the
    file or directory they point to."""
    if source.is_file():
        files[prefix + source.name] = source
        if source.stat().st_mode & 0o111:
            executables.append(prefix + source.name)
        return
    for entry in scan_tree(source, exclude).entries:
        path = source / entry.path
        if path.is_dir():  # a symlink to a directory
            _add_tree(files, executables, path, (), f"{prefix}{entry.path}/")
            continue
        if not path.is_file():
            continue  # a dangling link: nothing to stage
        files[prefix + entry.path] = path
        if path.stat().st_mode & 0o111:
            executables.append(prefix + entry.path)


def _sync(store: BlobStore, files: dict[str, Path], blobs: dict[str, bytes], owned: tuple[str, ...]
          ) -> StagedBundle:
    existing: dict[str, BlobInfo] = {info.name: info for info in store.list("", checksums=True)}
    uploaded = unchanged = 0
    for name, path in files.items():
        if same_content(path, existing.get(name)):
            unchanged += 1
            continue
        store.upload_file(path, name)
        uploaded += 1
    for name, data in blobs.items():
        if _same_bytes(data, existing.get(name)):
            unchanged += 1
            continue
        store.write_bytes(name, data)
        uploaded += 1
    # Only what this module stages (the wheels beside it are providers/gcp_guard_host.py's).
    doomed = [name for name in existing if name.startswith(owned) and name not in files and name not in blobs]
    for name in doomed:
        store.delete(name)
    return StagedBundle(uploaded, unchanged, len(doomed))


def _same_bytes(data: bytes, remote: BlobInfo | None) -> bool:
    return remote is not None and remote.size == len(data) and remote.crc32c == crc32c_of_bytes(data)
