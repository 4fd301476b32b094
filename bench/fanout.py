"""`exec true` on 1, 8 and 32 loopback sshd workers: tpuops fan-out against the system `ssh` started in parallel.

What a user's `tpuops exec NAME -- true` costs (fresh connections: connect, key exchange, auth, one
command), without the CLI's start-up. Side by side and alternating, N rounds; medians, and the ratio of
32 workers to 1 (goal: within 2x).

Needs root and OpenSSH sshd (like the tests). Usage: python bench/fanout.py [--runs 5] [--sizes 1,8,32]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sshd import SshdCluster  # noqa: E402
from tpuops.remote.fanout import exec_all  # noqa: E402
from tpuops.remote.ssh import KnownHosts, SshRunner, SshSettings, SshTarget, load_private_key  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tpuops_exec(cluster: SshdCluster, work: Path, count: int, cpu: list[float] | None = None) -> float:
    known = KnownHosts(work / "known_hosts")
    settings = SshSettings(cluster.client_key, work / "known_hosts", connect_timeout=20)
    key = load_private_key(cluster.client_key)
    start, cpu_start = time.perf_counter(), cpu_seconds()
    runners = [SshRunner(SshTarget(f"w{w.index}", w.host, w.port, "root"), settings, known, key)
               for w in cluster.workers[:count]]
    results = exec_all(runners, ["true"])
    elapsed = time.perf_counter() - start
    if cpu is not None:
        cpu.append(cpu_seconds() - cpu_start)
    failed = [r.error or r.exit_code for r in results if not r.ok]
    if failed:
        raise SystemExit(f"tpuops exec failed: {failed}")
    return elapsed


def ssh_exec(cluster: SshdCluster, work: Path, count: int) -> float:
    start = time.perf_counter()
    processes = [
        subprocess.Popen(["ssh", "-i", str(cluster.client_key), "-o", "BatchMode=yes",
                          "-o", f"UserKnownHostsFile={work / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
                          "-p", str(w.port), f"root@{w.host}", "true"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for w in cluster.workers[:count]
    ]
    for process in processes:
        _, err = process.communicate(timeout=120)
        if process.returncode != 0:
            raise SystemExit(f"ssh failed: {err.decode()}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="1,8,32")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="tpuops-bench-fanout-"))
    cluster = SshdCluster(work / "sshd", max(sizes)).start_all()
    try:
        tpuops_exec(cluster, work, max(sizes))  # records every host key (trust on first use), warms caches
        samples: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.runs):
            for size in sizes:
                cpu = samples.setdefault(("cpu", size), [])
                samples.setdefault(("tpuops", size), []).append(tpuops_exec(cluster, work, size, cpu))
                samples.setdefault(("ssh", size), []).append(ssh_exec(cluster, work, size))
        print(f"exec true, fresh connections, median of {args.runs} rounds")
        print(f"{'workers':>7} {'tpuops s':>9} {'ssh x N s':>10} {'ratio':>6} {'tpuops client CPU s':>20}")
        for size in sizes:
            ours = statistics.median(samples[("tpuops", size)])
            theirs = statistics.median(samples[("ssh", size)])
            cpu = statistics.median(samples[("cpu", size)])
            print(f"{size:>7} {ours:9.3f} {theirs:10.3f} {ours / theirs:6.2f} {cpu:20.3f}")
        one = statistics.median(samples[("tpuops", sizes[0])])
        most = statistics.median(samples[("tpuops", sizes[-1])])
        print(f"tpuops {sizes[-1]} workers / {sizes[0]}: {most / one:.2f}x (goal within 2x; on loopback every sshd "
              "also runs on this machine's cores, which a pod slice's hosts do not)")
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
