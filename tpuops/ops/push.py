"""`tpuops push` and a launch's push: the code directory and the spec's `data:` to every worker (trees sent
as deltas against what each worker already has, `remote/sync.py`) and to gs:// (objects whose size and CRC32C
already match are skipped). The push cache in the cluster's state folder remembers what went where."""

from __future__ import annotations

import hashlib
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tpuops import rules
from tpuops.access.cluster import ClusterAccess, cluster_access, make_runners
from tpuops.access.workers import worker_targets
from tpuops.context import Context
from tpuops.errors import TpuopsError
from tpuops.remote.base import Runner
from tpuops.remote.fanout import DEFAULT_MAX_PARALLEL
from tpuops.remote.manifest import scan_tree
from tpuops.remote.push_cache import sweep_cache
from tpuops.remote.push_results import ProgressHandler, PushResult
from tpuops.remote.sync import push_tree


@dataclass(frozen=True)
class UploadResult:
    """One `data:` entry copied to object storage."""

    source: str
    url: str
    files: int
    uploaded: int
    skipped: int
    bytes_uploaded: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "url": self.url, "files": self.files, "uploaded": self.uploaded,
                "skipped": self.skipped, "bytes_uploaded": self.bytes_uploaded, "error": self.error, "ok": self.ok}


@dataclass(frozen=True)
class PushReport:
    cluster: str
    trees: tuple[PushResult, ...]
    uploads: tuple[UploadResult, ...]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.trees) and all(u.ok for u in self.uploads)

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "ok": self.ok, "trees": [t.as_dict() for t in self.trees],
                "uploads": [u.as_dict() for u in self.uploads]}


UploadProgress = Callable[[str, int, int], None]  # (url, bytes done, bytes total)
PUSH_CACHE = "push"  # in the cluster's state folder: manifests and file hashes of earlier pushes, nothing else


def push_cache(ctx: Context, cluster: str) -> Path:
    return ctx.store.cluster_dir(cluster) / PUSH_CACHE


def forget_pushes(ctx: Context, cluster: str) -> None:
    """The workers are gone: what we knew of their trees goes too (and anything an older version left)."""
    shutil.rmtree(push_cache(ctx, cluster), ignore_errors=True)


def code_dest(cluster: str) -> str:
    return f"~/tpuops/{cluster}/code"


def push(
    ctx: Context,
    name: str | None,
    *,
    code: bool = True,
    data: bool = True,
    connect_timeout: float | None = None,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    on_upload: UploadProgress | None = None,
    on_new_host_key: Callable[[str, str], None] | None = None,
    on_progress: ProgressHandler | None = None,
) -> PushReport:
    """Code to `~/tpuops/NAME/code` on every target, `data:` entries to gs:// or to a path on every target.

    A directory `from` becomes the `to` directory; a single file `from` lands inside `to` (like `cp f dir/`).
    Per-worker and per-upload failures are in the report (`report.ok`), never raised; bad specs, a missing
    cluster or key are raised as one TpuopsError. `on_progress` hears every worker's part of each tree as it goes.
    """
    access = cluster_access(ctx, name, need_spec=True)
    return push_to(ctx, access, code=code, data=data, connect_timeout=connect_timeout, max_parallel=max_parallel,
                   on_upload=on_upload, on_new_host_key=on_new_host_key, on_progress=on_progress)


def push_to(
    ctx: Context,
    access: ClusterAccess,
    *,
    runners: Sequence[Runner] | None = None,
    code: bool = True,
    data: bool = True,
    connect_timeout: float | None = None,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    on_upload: UploadProgress | None = None,
    on_new_host_key: Callable[[str, str], None] | None = None,
    on_progress: ProgressHandler | None = None,
) -> PushReport:
    """`push` for a caller that holds the cluster's access, and may hold open runners to every worker (a
    launch): those are used and left open; otherwise runners are opened (and closed) here."""
    spec = access.spec
    assert spec is not None
    base_dir = Path(access.state.spec_path).resolve().parent
    rules.require_local_paths(spec, base_dir, access.state.spec_path, code=code, data=data)  # before sending any
    cache_root = push_cache(ctx, access.state.name)
    for folder in cache_root.iterdir() if cache_root.is_dir() else ():  # what an interrupted push may have left
        if folder.is_dir():
            sweep_cache(folder)
    trees: list[PushResult] = []
    uploads: list[UploadResult] = []
    tree_jobs: list[tuple[Path, str, Sequence[str]]] = []
    if code:
        tree_jobs.append((base_dir / spec.code.path, code_dest(access.state.name), spec.code.exclude))
    for item in spec.data if data else []:
        source = base_dir / Path(item.from_).expanduser()
        if item.to.startswith("gs://"):
            uploads.append(upload_tree(ctx, access, source, item.to, on_upload))
        else:
            tree_jobs.append((source, item.to, ()))
    if tree_jobs:
        opened = [] if runners is not None else make_runners(access, access.workers, connect_timeout=connect_timeout,
                                                             on_new_host_key=on_new_host_key)
        relay = access.provider.relay_hosts(worker_targets(access.workers))
        try:
            for source, dest, exclude in tree_jobs:
                cache_dir = cache_root / hashlib.sha256(dest.encode()).hexdigest()[:12]
                trees.append(push_tree(list(runners if runners is not None else opened), source, dest,
                                       exclude=exclude, cache_dir=cache_dir, relay_hosts=relay,
                                       max_parallel=max_parallel,
                                       slice_of={w.name: w.slice for w in access.workers},
                                       on_progress=on_progress))
        finally:
            for runner in opened:
                runner.close()
    return PushReport(access.state.name, tuple(trees), tuple(uploads))


def upload_tree(ctx: Context, access: ClusterAccess, source: Path, url: str,
                on_progress: UploadProgress | None = None, parallel: int = 8) -> UploadResult:
    """Upload a file or directory to gs://..., skipping objects whose size and CRC32C already match."""
    from tpuops.cloud.blobs import same_content

    try:
        store = access.provider.blob_store(url)
        files = [(source, source.name)] if source.is_file() else [
            (source / e.path, e.path) for e in scan_tree(source, ()).entries if e.link is None
        ]
        remote = {info.name: info for info in store.list("", checksums=True)}
    except TpuopsError as err:
        return UploadResult(str(source), url, 0, 0, 0, 0, str(err))
    todo = [(path, blob) for path, blob in files if not same_content(path, remote.get(blob))]
    total = sum(path.stat().st_size for path, _ in todo)
    done = 0
    lock = threading.Lock()

    def upload(job: tuple[Path, str]) -> None:
        nonlocal done
        store.upload_file(job[0], job[1])
        with lock:
            done += job[0].stat().st_size
            if on_progress:
                on_progress(url, done, total)

    error = None
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="tpuops-upload") as pool:
        for future in [pool.submit(upload, job) for job in todo]:
            try:
                future.result()
            except (TpuopsError, OSError) as err:
                error = error or f"upload to {url} failed: {err}"
    return UploadResult(str(source), url, len(files), len(todo), len(files) - len(todo), done, error)


# ------------------------------------------------------------------------------------------------- ssh
