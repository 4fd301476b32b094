"""Incremental push of a local tree to a path on every worker, by content hash, sent once.

How it works (the worker side is `push_agent.py`, the manifest is in `manifest.py`, the payload in `payload.py`):
1. Scan the local tree (pathspec: `code.exclude` + `.tpuopsignore`, gitignore syntax) into a manifest of
   (path, size, mode, sha256, symlink); its hash is the tree id.
2. Ask every worker which tree its destination points at (one tiny command each, while step 1 scans).
   Workers already on this tree are done: a push with nothing changed sends no file data.
3. For the others, diff against the manifest of the tree they have (cached locally, since we pushed it,
   else read from the worker) and pack only new or changed files, plus the manifest, into one tar, built
   while it is sent (`payload.py`: no temporary file here, compressed only where that pays).
4. Send the payload once: to one worker over SSH, which applies it and serves it for a short while on
   its internal IP (random port, 128-bit random token in the URL, sha256 checked by the fetchers); the
   other workers fetch it from there over the VPC. A worker that cannot fetch gets a direct copy.
`on_progress` hears each worker's part as it goes (bytes and their total, known before the first is sent);
what a push reports is in `push_results.py`, the agent as shipped in `push_ship.py`.

Why worker 0 relaying rather than staging in the bucket: it needs no credentials on the workers, no
bucket (a legacy Node's client VM or a spec without one work the same), no extra request costs, and
the hop inside the zone is faster than GCS for many small files; the client's uplink carries the
payload once either way. Deleted files disappear because a tree is rebuilt from the manifest: changed
files from the payload, unchanged ones hard-linked from the current tree, then one atomic symlink swap.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tpuops.remote.base import Runner, RunResult
from tpuops.remote.fanout import DEFAULT_MAX_PARALLEL, run_each
from tpuops.remote.manifest import Manifest
from tpuops.remote.payload import Payload
from tpuops.remote.push_cache import cached_manifest, remember_manifest, scan_with_cached_hashes
from tpuops.remote.push_results import ProgressHandler, PushProgress, PushResult, WorkerPush
from tpuops.remote.push_ship import agent_command
from tpuops.shipped import script_command
from tpuops.shipped.push_protocol import (
    EXIT_DISK,
    EXIT_NOT_OURS,
    RESEND_FULL,
    SEND_DIRECT,
    after_apply,
)

RELAY_SERVE_SECONDS = 600  # how long the relay worker serves at most (it stops as soon as all fetched)
# Below this a direct copy to each worker is quicker than starting a relay, and N copies cost little.
RELAY_MIN_BYTES = 256 * 1024
PROGRESS_EVERY = 0.1  # seconds between two progress reports of one worker


# ------------------------------------------------------------------------------------------- the push


@dataclass
class _Pusher:
    root: Path
    dest: str
    manifest: Manifest
    cache_dir: Path
    relay_hosts: Mapping[str, str]  # worker name -> address the other workers can reach it at
    max_parallel: int
    relay_min_bytes: int
    slice_of: Mapping[str, int] = field(default_factory=dict)  # worker name -> its slice (Multislice)
    compress: bool = True  # False when every worker is on this machine (loopback, local directories)
    on_progress: ProgressHandler | None = None
    outcomes: dict[str, WorkerPush] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)  # worker name -> when its part began
    payload_bytes: int = 0
    changed_files: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: WorkerPush, content_bytes: int = 0) -> None:
        with self.lock:
            self.outcomes[outcome.worker] = outcome
        self.report(outcome.worker, outcome.status, content_bytes, content_bytes)

    def report(self, worker: str, status: str, done: int = 0, total: int = 0) -> None:
        if self.on_progress is None:
            return
        began = self.started.setdefault(worker, time.monotonic())
        self.on_progress(PushProgress(self.dest, worker, status, done, total, time.monotonic() - began))

    def progress_of(self, worker: str, total: int) -> Callable[[int], None]:
        """What a payload stream calls with its bytes so far: reported to on_progress a few times a second."""
        last = [0.0]
        self.started[worker] = time.monotonic()  # the rate counts from here
        self.report(worker, "sending", 0, total)

        def sent(done: int) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_EVERY or done == total:
                last[0] = now
                self.report(worker, "sending", done, total)

        return sent


    # step 3: the manifest a worker's current tree has
    def base_manifest(self, runner: Runner, tree: str | None) -> Manifest | None:
        if tree is None:
            return None
        cached = cached_manifest(self.cache_dir, tree)
        if cached is not None:
            return cached
        result = runner.run(agent_command("manifest", self.dest, tree), capture=True, timeout=120)
        if not result.ok:
            return None  # unknown base: send everything
        text = result.stdout.decode()
        remember_manifest(self.cache_dir, tree, text)
        return Manifest.from_text(text)

    # step 4: send one payload to a group of workers that share a base tree
    def send_group(self, runners: Sequence[Runner], base: str | None, base_manifest: Manifest | None) -> None:
        if base_manifest is None:
            base = None  # we cannot name a base we know nothing about: send everything
        payload = Payload.for_delta(self.root, self.manifest, base_manifest, base, self.compress)
        seed_host = self.relay_hosts.get(runners[0].name)
        if len(runners) > 1 and seed_host and payload.content_bytes >= self.relay_min_bytes:
            self._relay(self._by_slice(runners), base, payload, seed_host)
        else:
            run_each(runners, lambda r: self._direct(r, base, payload), self.max_parallel)
        with self.lock:
            self.payload_bytes += payload.size or 0
            self.changed_files = max(self.changed_files, len(payload.files))

    def _by_slice(self, runners: Sequence[Runner]) -> list[list[Runner]]:
        """The group's workers slice by slice (all in one without slices), the first runner's slice first."""
        slices: dict[int, list[Runner]] = {}
        for runner in runners:
            slices.setdefault(self.slice_of.get(runner.name, 0), []).append(runner)
        return list(slices.values())

    def _apply_args(self, base: str | None) -> list[str]:
        return ["apply", self.dest, base or "-", self.manifest.tree_id]

    def _direct(self, runner: Runner, base: str | None, payload: Payload, sent_before: int = 0) -> RunResult:
        stdin = payload.raw(self.progress_of(runner.name, payload.content_bytes))
        result = runner.run(agent_command(*self._apply_args(base)), stdin=stdin, capture=True)
        if after_apply(result.exit_code, base) == RESEND_FULL:
            full = Payload.for_delta(self.root, self.manifest, None, None, self.compress)
            return self._direct(runner, None, full, sent_before + result.bytes_sent)
        sent = sent_before + result.bytes_sent
        error = None if result.ok else _agent_error(result, self.dest)
        self.record(WorkerPush(runner.name, "sent" if result.ok else "failed", sent, error, result.duration),
                    payload.content_bytes if result.ok else 0)
        return result

    def _relay(self, slices: Sequence[Sequence[Runner]], base: str | None, payload: Payload, seed_host: str) -> None:
        """The first worker of the first slice receives the payload over SSH and serves it; the first worker of
        every other slice fetches it from there and serves its own slice; everyone else fetches from their
        slice's server (then the seed, then a direct copy, whichever works first). One slice: one server."""
        seed = _Server(slices[0][0], seed_host)
        heads = [_Server(group[0], self.relay_hosts[group[0].name]) for group in slices[1:]
                 if self.relay_hosts.get(group[0].name)]
        head_of = {server.runner.name: server for server in heads}
        servers_of: dict[str, list[_Server]] = {runner.name: [seed] for runner in slices[0][1:]}
        for group in slices[1:]:
            head = head_of.get(group[0].name)
            servers_of |= {r.name: [head, seed] for r in group[1:]} if head else {r.name: [seed] for r in group}
        fetchers = [runner for group in slices for runner in group if runner.name in servers_of]
        seed.start(lambda: self._serve(
            seed, base, payload,
            received=payload.framed(self.progress_of(seed.runner.name, payload.content_bytes), digest=True)))
        for head in heads:
            head.start(lambda head=head: self._serve(head, base, payload, fetch_from=seed))
        try:
            run_each(fetchers, lambda r: self._fetch(r, servers_of[r.name], base, payload), self.max_parallel)
        finally:
            for server in (*heads, seed):  # the heads fetched from the seed before they served: close in this order
                server.finish()

    def _serve(self, server: _Server, base: str | None, payload: Payload, *, received: Iterator[bytes] | None = None,
               fetch_from: _Server | None = None) -> None:
        """Run the agent on a serving worker: given the payload on stdin (`received`), or fetching it first."""
        source: list[str] = []
        if fetch_from is not None:
            url = fetch_from.wait_url()
            if url is None:  # the seed cannot serve: this head gets a direct copy and serves nobody
                server.ready.set()
                self._direct(server.runner, base, payload)
                return
            self.report(server.runner.name, "fetching")
            source = ["--fetch", url, str(payload.size), str(payload.digest)]

        def stdin() -> Iterator[bytes]:
            yield from received or ()
            server.done.wait(RELAY_SERVE_SECONDS)  # keep stdin open: the relay serves until it closes

        args = [*self._apply_args(base), *source, "--serve", server.host, server.token, str(RELAY_SERVE_SECONDS)]
        try:
            result = server.runner.run(agent_command(*args), stdin=stdin(), on_line=server.watch, capture=True)
        except Exception as err:  # noqa: BLE001  reported for this worker; its fetchers fall back
            result = RunResult(server.runner.name, None, 0.0, f"{server.runner.name}: {err}")
        finally:
            server.ready.set()
        verdict = after_apply(result.exit_code, base, fetched=fetch_from is not None)
        if verdict in (RESEND_FULL, SEND_DIRECT):
            self._direct(server.runner, base, payload)  # which resends everything if the base is still unusable
            return
        error = None if result.ok else _agent_error(result, self.dest)
        status = "failed" if error else "relayed" if fetch_from is not None else "sent"
        self.record(WorkerPush(server.runner.name, status, result.bytes_sent, error, result.duration),
                    payload.content_bytes if status == "sent" else 0)

    def _fetch(self, runner: Runner, servers: Sequence[_Server], base: str | None, payload: Payload) -> RunResult:
        for server in servers:
            url = server.wait_url()
            if url is None:
                continue
            self.report(runner.name, "fetching")
            args = [*self._apply_args(base), "--fetch", url, str(payload.size), str(payload.digest)]
            result = runner.run(agent_command(*args), capture=True, timeout=RELAY_SERVE_SECONDS)
            if result.ok:
                self.record(WorkerPush(runner.name, "relayed", 0, None, result.duration))
                return result
            if after_apply(result.exit_code, base, fetched=True) != SEND_DIRECT:
                self.record(WorkerPush(runner.name, "failed", 0, _agent_error(result, self.dest), result.duration))
                return result
        return self._direct(runner, base, payload)  # no relay reachable from this worker: copy directly


@dataclass
class _Server:
    """A worker serving the payload to others over the internal network until `finish`."""

    runner: Runner
    host: str  # the address the others reach it at
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    ready: threading.Event = field(default_factory=threading.Event)  # serving, or never will
    done: threading.Event = field(default_factory=threading.Event)  # its fetchers are done: close its stdin
    port: int | None = None
    thread: threading.Thread | None = None

    def start(self, serve: Callable[[], None]) -> None:
        self.thread = threading.Thread(target=serve, name=f"tpuops-relay-{self.runner.name}", daemon=True)
        self.thread.start()

    def watch(self, worker: str, stream: str, line: str) -> None:
        if stream == "stdout" and line.startswith('{"serving"'):
            self.port = json.loads(line)["serving"]
            self.ready.set()  # with no port, the others go elsewhere

    def wait_url(self) -> str | None:
        """Where to fetch, once it serves; None when it cannot (its agent failed or it could not listen)."""
        # As long as it is still receiving (a big payload over a slow uplink takes a while), keep waiting.
        while not self.ready.wait(1.0) and self.thread is not None and self.thread.is_alive():
            pass
        return f"http://{_url_host(self.host)}:{self.port}/{self.token}" if self.port else None

    def finish(self) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join(RELAY_SERVE_SECONDS)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _agent_error(result: RunResult, dest: str) -> str:
    """One line for a failed push step on a worker, with what to do."""
    if result.error:
        return result.error
    message = result.program_failure("tpuops-push", "the push helper needs it")
    hint = {
        EXIT_DISK: "free space on the worker's disk (`tpuops exec NAME -- df -h ~`)",
        EXIT_NOT_OURS: f"move {dest} aside on that worker",
    }.get(result.exit_code or 0, "run `tpuops push` again")
    return f"{result.worker}: push to {dest} failed: {message} (hint: {hint})"


def push_tree(
    runners: Sequence[Runner],
    source: Path,
    dest: str,
    *,
    exclude: Sequence[str] = (),
    cache_dir: Path,
    relay_hosts: Mapping[str, str] | None = None,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    relay_min_bytes: int = RELAY_MIN_BYTES,
    slice_of: Mapping[str, int] | None = None,
    on_progress: ProgressHandler | None = None,
) -> PushResult:
    """Make `dest` on every worker hold exactly the (filtered) tree at `source`, sending changed bytes once.

    `relay_hosts` maps worker names to addresses the other workers reach them at (internal IPs); without
    it (or for payloads under `relay_min_bytes`, where a direct copy costs less than starting a relay) every
    worker gets a direct copy. `slice_of` (worker name -> slice, Multislice) makes the relay two-level: the
    payload crosses between slices once per slice, and each slice's first worker serves its slice.
    `cache_dir` keeps manifests and file hashes between pushes (`sweep_cache` keeps it so).
    `on_progress` is called from the pushing threads.
    Runners are left open (the caller closes them). Errors are per worker, in the result.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Step 2 (asking every worker which tree it has: a connection and a process each) while step 1 scans.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tpuops-push-state") as pool:
        asking = pool.submit(current_trees, runners, dest, max_parallel)
        manifest = scan_with_cached_hashes(cache_dir, source, exclude)
        remember_manifest(cache_dir, manifest.tree_id, manifest.text)
        trees, unreachable = asking.result()

    # Compressing costs more than it saves when every worker is on this machine (loopback, local directories).
    compress = not all(runner.nearby for runner in runners)
    pusher = _Pusher(source, dest, manifest, cache_dir, relay_hosts or {}, max_parallel, relay_min_bytes,
                     slice_of or {}, compress, on_progress)
    started = time.monotonic()
    for failed in unreachable:
        pusher.record(failed)
    groups: dict[str | None, list[Runner]] = {}
    for runner in runners:
        if runner.name not in trees:
            continue  # failed already
        if trees[runner.name] == manifest.tree_id:
            pusher.record(WorkerPush(runner.name, "unchanged", duration=time.monotonic() - started))
        else:
            groups.setdefault(trees[runner.name], []).append(runner)
    for base, members in groups.items():
        pusher.send_group(members, base, pusher.base_manifest(members[0], base))
    outcomes = tuple(pusher.outcomes[r.name] for r in runners)
    return PushResult(dest, manifest.tree_id, len(manifest.entries), manifest.total_bytes, pusher.changed_files,
                      pusher.payload_bytes, outcomes)


def current_trees(runners: Sequence[Runner], dest: str, max_parallel: int,
                  ) -> tuple[dict[str, str | None], list[WorkerPush]]:
    """Which tree `dest` holds on every worker (None: none yet), and the workers that could not say."""
    trees: dict[str, str | None] = {}

    def ask(runner: Runner) -> RunResult:
        result = runner.run(script_command("push_state", dest), capture=True, timeout=120)
        if result.ok:
            trees[runner.name] = json.loads(result.stdout)["tree"]
        return result

    failed = [WorkerPush(result.worker, "failed", error=_agent_error(result, dest))
              for result in run_each(runners, ask, max_parallel) if not result.ok]
    return trees, failed
