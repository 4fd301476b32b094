"""Push a 2,000-file tree to 8 loopback sshd workers: tpuops push against `rsync -a` to every worker in parallel.

Side by side in one run, alternating so both see the same machine load, N rounds:
  first push (empty destination), no-change push, one-file-changed push;
time (median) and bytes sent from the client (goal: tpuops about 1x the payload for N workers, rsync Nx).
tpuops bytes are payload bytes written to SSH channels (plus ~7 KiB of command text per worker and
command, not counted); rsync's are its own `--stats` "Total bytes sent", summed over workers.
Each tpuops push opens fresh connections, as the command does.

Needs root and OpenSSH sshd + rsync (like the tests). Usage: python bench/push.py [--runs 3] [--workers 8]
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sshd import SshdCluster  # noqa: E402
from tpuops.remote.ssh import KnownHosts, SshRunner, SshSettings, SshTarget  # noqa: E402
from tpuops.remote.sync import push_tree  # noqa: E402

FILES = 2000


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


def tpuops_push(cluster: SshdCluster, work: Path, src: Path, dest: str) -> tuple[float, int]:
    known = KnownHosts(work / "known_hosts")
    settings = SshSettings(cluster.client_key, work / "known_hosts", connect_timeout=10)
    runners = [SshRunner(SshTarget(f"w{w.index}", w.host, w.port, "root"), settings, known)
               for w in cluster.workers]
    relay = {f"w{w.index}": w.host for w in cluster.workers}
    start = time.perf_counter()
    result = push_tree(runners, src, dest, cache_dir=work / "cache", relay_hosts=relay)
    for runner in runners:
        runner.close()
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"tpuops push failed: {[w.error for w in result.workers if w.error]}")
    return elapsed, result.bytes_sent


def rsync_push(cluster: SshdCluster, src: Path, dest: str) -> tuple[float, int]:
    ssh = (f"ssh -i {cluster.client_key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
           f"-o LogLevel=ERROR -p {cluster.port}")
    start = time.perf_counter()
    processes = [
        subprocess.Popen(["rsync", "-a", "--delete", "--stats", "-e", ssh, f"{src}/", f"root@{w.host}:{dest}/"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in cluster.workers
    ]
    sent = 0
    for process in processes:
        out, err = process.communicate(timeout=300)
        if process.returncode != 0:
            raise SystemExit(f"rsync failed: {err}")
        sent += int(re.search(r"Total bytes sent: ([\d,]+)", out).group(1).replace(",", ""))
    return time.perf_counter() - start, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    if shutil.which("rsync") is None:
        raise SystemExit("rsync is not installed")
    work = Path(tempfile.mkdtemp(prefix="tpuops-bench-push-"))
    cluster = SshdCluster(work / "sshd", args.workers).start_all()
    try:
        src = work / "src"
        payload = make_tree(src)
        print(f"tree: {FILES} files, {payload / 2**20:.1f} MiB; {args.workers} workers; {args.runs} rounds")
        samples: dict[tuple[str, str], list[tuple[float, int]]] = {}
        for run in range(args.runs):
            (src / "pkg0" / "sub0" / "module_0.py").write_text(f"# round {run}\n")  # fresh first-push state
            for phase in ("first", "no change", "one changed"):
                if phase == "one changed":
                    (src / "pkg1" / "sub1" / "module_1.py").write_text(f"# changed in round {run}\n")
                samples.setdefault(("tpuops", phase), []).append(
                    tpuops_push(cluster, work, src, f"~/bench/tpuops-{run}"))
                samples.setdefault(("rsync", phase), []).append(rsync_push(cluster, src, f"bench/rsync-{run}"))
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
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
