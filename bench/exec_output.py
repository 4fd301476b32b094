"""`tpuops exec NAME -- 'seq 1 100000' >/dev/null` on 2 loopback sshd workers, against the system `ssh`.

What a user waits for when a command prints a lot: the whole CLI as users run it (a subprocess, its start-up
included), output to /dev/null, side by side and alternating with `ssh host seq ...` started on every worker
at once. Medians of N rounds: wall time, the CLI's CPU time, and the ratio to ssh (goal: under 1 s for
100k lines from 2 workers).

Needs root and OpenSSH sshd (like the tests). Usage: python bench/exec_output.py [--runs 5] [--lines 100000]
"""

from __future__ import annotations

import argparse
import os
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

SPEC = "name: bench\nzone: europe-west4-a\ntpu:\n  type: v3-32\n"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tpuops_exec(env: dict[str, str], lines: int) -> tuple[float, float]:
    cpu_start, start = children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tpuops", "exec", "bench", "--", f"seq 1 {lines}"], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tpuops exec failed: {done.stderr.decode()[-2000:]}")
    return elapsed, children_cpu() - cpu_start


def ssh_exec(cluster: SshdCluster, known_hosts: Path, lines: int) -> float:
    start = time.perf_counter()
    processes = [
        subprocess.Popen(["ssh", "-i", str(cluster.client_key), "-o", "BatchMode=yes",
                          "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
                          "-p", str(w.port), f"root@{w.host}", f"seq 1 {lines}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for w in cluster.workers
    ]
    for process in processes:
        _, err = process.communicate(timeout=300)
        if process.returncode != 0:
            raise SystemExit(f"ssh failed: {err.decode()}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tpuops-bench-exec-output-"))
    cluster = SshdCluster(work / "sshd", 2).start_all()
    try:
        home = work / "tpuops-home"
        spec = work / "spec.yaml"
        spec.write_text(SPEC)
        cluster_dir = cluster.write_cluster(home, "bench", spec, pin=True)
        env = {**os.environ, "TPUOPS_HOME": str(home), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        tpuops_exec(env, 10)  # warm caches
        ours, cpu, theirs = [], [], []
        for _ in range(args.runs):
            elapsed, used = tpuops_exec(env, args.lines)
            ours.append(elapsed)
            cpu.append(used)
            theirs.append(ssh_exec(cluster, cluster_dir / "known_hosts", args.lines))
        startup = statistics.median(tpuops_exec(env, 1)[0] for _ in range(args.runs))
        print(f"exec 'seq 1 {args.lines}' on 2 workers, output to /dev/null, median of {args.runs} rounds")
        print(f"  tpuops exec: {statistics.median(ours):.3f} s wall, {statistics.median(cpu):.3f} s CPU "
              f"(same command with 1 line: {startup:.3f} s: start-up, connect, one command)")
        print(f"  ssh x 2:     {statistics.median(theirs):.3f} s wall")
        print(f"  ratio tpuops / ssh: {statistics.median(ours) / statistics.median(theirs):.2f} "
              f"(goal: tpuops under 1 s)")
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
