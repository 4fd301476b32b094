"""Push speed, side by side in one run, alternating so every tool sees the same machine load; medians of N rounds.

1. Throughput: a 300 MB tree of mixed files (2,000 small source files, 160 medium files, 6 large ones; half
   of the bytes compress like text, half do not, like shards and checkpoints), first push (empty destination,
   nothing cached) to one worker (dirty pages flushed before each copy, the order rotated every round):
   tpuops against `rsync -a` and `cp -a` on the local provider (a worker is a directory), and against
   `rsync -a` over loopback sshd. MB/s is the tree's size over the time until the
   worker has it (goal: tpuops at least 0.8x rsync's rate). CPU is the seconds of CPU this process and its
   children used (on the local provider that is every process involved; over sshd, the client side only):
   steadier than wall time on a shared machine.
2. Incremental: a 2,000-file code tree to 8 loopback sshd workers, tpuops against `rsync -a` to every worker in
   parallel: first push, no-change push, one-file-changed push; time and bytes sent from the client (tpuops
   about 1x the payload for N workers, rsync Nx). tpuops bytes are payload bytes written to SSH channels;
   rsync's are its own `--stats` "Total bytes sent", summed over workers.
Each tpuops push opens fresh connections, as the command does.

Needs root and OpenSSH sshd + rsync (like the tests). Usage:
  python bench/push.py [--runs 3] [--size-mb 300] [--workers 8] [--only throughput|incremental]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sshd import SshdCluster  # noqa: E402
from tpuops.remote.base import Runner  # noqa: E402
from tpuops.remote.local import LocalRunner  # noqa: E402
from tpuops.remote.ssh import KnownHosts, SshRunner, SshSettings, SshTarget  # noqa: E402
from tpuops.remote.sync import push_tree  # noqa: E402

FILES = 2000
MB = 1_000_000
SSH_OPTIONS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"

WORDS = [
    "def", "class", "return", "import", "self", "value", "index", "tensor", "batch", "shape", "config",
    "model", "layer", "step", "loss", "grad", "optimizer", "learning_rate", "x", "y", "z", "for", "in", "if",
    "else", "while", "with", "as", "None", "True", "False", "np", "jax", "torch",
]


def make_tree(root: Path) -> int:
    """Code-like text (compresses about 3-4x like real source, not 100x like repeated lines)."""
    rng = random.Random(42)
    total = 0
    for i in range(FILES):
        path = root / f"pkg{i % 40}" / f"sub{i % 7}" / f"module_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(rng.randint(3, 10)))
                 for _ in range(40 + i % 120)]
        text = "\n".join(lines).encode()
        path.write_bytes(text)
        total += len(text)
    return total


def make_mixed_tree(root: Path, size_mb: int) -> int:
    """The source tree of `make_tree` (~11 MB), then medium and large files up to `size_mb`, half text-like."""
    total = make_tree(root)
    rng = random.Random(7)
    text = "\n".join(" ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(12))
                     for _ in range(80_000)).encode()  # ~6 MB of text to cut files from
    rest = max(size_mb * MB - total, 0)
    sizes = [("medium", rest * 2 // 5 // 160)] * 160 + [("large", rest * 3 // 5 // 6)] * 6
    for i, (kind, size) in enumerate(sizes):
        path = root / kind / f"{kind}_{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            left = size
            while left:
                piece = min(left, 4 * MB)
                if i % 2:
                    out.write(os.urandom(piece))
                else:
                    start = rng.randrange(0, len(text) - 1)
                    chunk = text[start:start + piece]
                    out.write(chunk + text[:piece - len(chunk)])
                left -= piece
        total += size
    return total


# ---------------------------------------------------------------------------------------- the contenders


def ssh_runners(cluster: SshdCluster, work: Path, count: int) -> tuple[list[Runner], dict[str, str]]:
    known = KnownHosts(work / "known_hosts")
    settings = SshSettings(cluster.client_key, work / "known_hosts", connect_timeout=10)
    workers = cluster.workers[:count]
    runners: list[Runner] = [SshRunner(SshTarget(f"w{w.index}", w.host, w.port, "root"), settings, known)
                             for w in workers]
    return runners, {f"w{w.index}": w.host for w in workers}


def tpuops_push(make: Callable[[], tuple[list[Runner], dict[str, str]]], cache: Path, src: Path,
                dest: str) -> tuple[float, int]:
    start = time.perf_counter()
    runners, relay = make()
    try:
        result = push_tree(runners, src, dest, cache_dir=cache, relay_hosts=relay)
    finally:
        for runner in runners:
            runner.close()
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"tpuops push failed: {[w.error for w in result.workers if w.error]}")
    return elapsed, result.bytes_sent


def rsync_ssh(cluster: SshdCluster, src: Path, dest: str, count: int) -> tuple[float, int]:
    ssh = f"ssh -i {cluster.client_key} {SSH_OPTIONS} -p {cluster.port}"
    start = time.perf_counter()
    processes = [
        subprocess.Popen(["rsync", "-a", "--delete", "--stats", "-e", ssh, f"{src}/", f"root@{w.host}:{dest}/"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in cluster.workers[:count]
    ]
    sent = 0
    for process in processes:
        out, err = process.communicate(timeout=600)
        if process.returncode != 0:
            raise SystemExit(f"rsync failed: {err}")
        sent += int(re.search(r"Total bytes sent: ([\d,]+)", out).group(1).replace(",", ""))
    return time.perf_counter() - start, sent


def cpu_seconds() -> float:
    """CPU used so far by this process and the children it has waited for (and theirs)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def local_copy(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    subprocess.run(argv, check=True, timeout=600, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, 0


def throughput(work: Path, cluster: SshdCluster, runs: int, size_mb: int) -> None:
    src = work / "mixed"
    size = make_mixed_tree(src, size_mb)
    files = sum(len(names) for _, _, names in os.walk(src))
    print(f"\nthroughput: {files} files, {size / MB:.0f} MB, first push to one worker, {runs} rounds")
    local_home = work / "local-w0"
    sshd_home = cluster.workers[0].home
    contenders: dict[tuple[str, str], Callable[[int], tuple[float, int]]] = {
        ("local", "tpuops"): lambda run: tpuops_push(lambda: ([LocalRunner("w0", local_home)], {}),
                                                     work / f"cache-local-{run}", src, f"~/t-{run}"),
        ("local", "rsync -a"): lambda run: local_copy(["rsync", "-a", f"{src}/", f"{local_home}/r-{run}/"]),
        ("local", "cp -a"): lambda run: local_copy(["cp", "-a", str(src), f"{local_home}/c-{run}"]),
        ("sshd", "tpuops"): lambda run: tpuops_push(lambda: ssh_runners(cluster, work, 1), work / f"cache-ssh-{run}",
                                                    src, f"~/t-{run}"),
        ("sshd", "rsync -a"): lambda run: rsync_ssh(cluster, src, f"r-{run}", 1),
    }
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in contenders}
    cpu: dict[tuple[str, str], list[float]] = {key: [] for key in contenders}
    keys = list(contenders)
    for run in range(runs):
        for key in keys[run % len(keys):] + keys[:run % len(keys)]:  # each goes first in turn
            os.sync()  # no one pays for the writeback of the one before
            before = cpu_seconds()
            samples[key].append(contenders[key](run)[0])
            cpu[key].append(cpu_seconds() - before)
        for home in (local_home, sshd_home):  # keep the disk from filling up: the trees are measured, not kept
            for leftover in list(home.glob("*-*")) + list(home.glob(".tpuops-trees")):
                shutil.rmtree(leftover, ignore_errors=True)
    print(f"{'where':<6} {'tool':<9} {'median s':>9} {'MB/s':>7} {'rate vs rsync':>14} {'CPU s':>6}")
    for (where, tool), times in samples.items():
        median = statistics.median(times)
        rsync = statistics.median(samples[(where, "rsync -a")])
        print(f"{where:<6} {tool:<9} {median:9.2f} {size / MB / median:7.1f} {rsync / median:13.2f}x "
              f"{statistics.median(cpu[(where, tool)]):6.2f}")


def incremental(work: Path, cluster: SshdCluster, runs: int, workers: int) -> None:
    src = work / "src"
    payload = make_tree(src)
    print(f"\nincremental: {FILES} files, {payload / 2**20:.1f} MiB; {workers} workers; {runs} rounds")
    samples: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for run in range(runs):
        (src / "pkg0" / "sub0" / "module_0.py").write_text(f"# round {run}\n")  # fresh first-push state
        for phase in ("first", "no change", "one changed"):
            if phase == "one changed":
                (src / "pkg1" / "sub1" / "module_1.py").write_text(f"# changed in round {run}\n")
            samples.setdefault(("tpuops", phase), []).append(
                tpuops_push(lambda: ssh_runners(cluster, work, workers), work / "cache", src, f"~/bench/tpuops-{run}"))
            samples.setdefault(("rsync", phase), []).append(rsync_ssh(cluster, src, f"bench/rsync-{run}", workers))
    print(f"{'phase':<12} {'tpuops s':>9} {'rsync s':>9} {'ratio':>6}  {'tpuops sent':>12} {'rsync sent':>12}"
          f"  {'tpuops/payload':>14} {'rsync/payload':>13}")
    for phase in ("first", "no change", "one changed"):
        ours, theirs = samples[("tpuops", phase)], samples[("rsync", phase)]
        t_ours = statistics.median(s[0] for s in ours)
        t_theirs = statistics.median(s[0] for s in theirs)
        b_ours = statistics.median(s[1] for s in ours)
        b_theirs = statistics.median(s[1] for s in theirs)
        per_payload = (f"{b_ours / payload:14.2f} {b_theirs / payload:13.2f}" if phase == "first" else "")
        print(f"{phase:<12} {t_ours:9.3f} {t_theirs:9.3f} {t_ours / t_theirs:6.2f}  {b_ours:12,.0f} "
              f"{b_theirs:12,.0f}  {per_payload}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8, help="workers of the incremental part")
    parser.add_argument("--size-mb", type=int, default=300, help="size of the throughput part's tree")
    parser.add_argument("--only", choices=("throughput", "incremental"))
    args = parser.parse_args()
    if shutil.which("rsync") is None:
        raise SystemExit("rsync is not installed")
    work = Path(tempfile.mkdtemp(prefix="tpuops-bench-push-"))
    cluster = SshdCluster(work / "sshd", max(args.workers, 1)).start_all()
    try:
        if args.only != "incremental":
            throughput(work, cluster, args.runs, args.size_mb)
        if args.only != "throughput":
            incremental(work, cluster, args.runs, args.workers)
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
