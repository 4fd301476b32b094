"""Push to a Multislice cluster (2 slices x 2 workers, loopback sshd): the two-level relay against one seed
serving every worker and against direct copies to each.

Side by side in one run, alternating so all three see the same machine load, N rounds of a first push of a
few MiB (incompressible, so the payload is what it says): bytes out of the client (goal: 1x the payload for
both relays, 4x for direct copies), fetches that cross between slices (goal: 1 per other slice for the
two-level relay; one per worker of the other slices for a single seed), and the median time.
On loopback every "slice" is the same machine, so the time shows the relay's overhead, not what the
data-center network saves; the cross-slice count is what scales.

Needs root and OpenSSH sshd (like the tests). Usage: python bench/push_slices.py [--runs 5] [--mib 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sshd import SshdCluster  # noqa: E402
from tpuops.remote.base import RunResult  # noqa: E402
from tpuops.remote.ssh import KnownHosts, SshRunner, SshSettings, SshTarget  # noqa: E402
from tpuops.remote.sync import push_tree  # noqa: E402

SLICE_OF = {"w0": 0, "w1": 0, "w2": 1, "w3": 1}
WAYS = ("two-level relay", "one seed", "direct copies")


class Counting:
    """A real SSH runner that counts the fetches this worker made from a worker of another slice."""

    def __init__(self, runner: SshRunner, host_slice: dict[str, int]) -> None:
        self.runner, self.name, self.host_slice, self.crossings = runner, runner.name, host_slice, 0

    def run(self, command: list[str], **kwargs: object) -> RunResult:
        if "--fetch" in command:
            host = command[command.index("--fetch") + 1].split("//")[1].rsplit(":", 1)[0]
            self.crossings += self.host_slice[host] != SLICE_OF[self.name]
        return self.runner.run(command, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        self.runner.close()


def push(cluster: SshdCluster, work: Path, src: Path, dest: str, way: str) -> tuple[float, int, int]:
    known = KnownHosts(work / "known_hosts")
    settings = SshSettings(cluster.client_key, work / "known_hosts", connect_timeout=10)
    host_slice = {w.host: SLICE_OF[f"w{w.index}"] for w in cluster.workers}
    runners = [Counting(SshRunner(SshTarget(f"w{w.index}", w.host, w.port, "root"), settings, known), host_slice)
               for w in cluster.workers]
    relay = {} if way == "direct copies" else {f"w{w.index}": w.host for w in cluster.workers}
    start = time.perf_counter()
    result = push_tree(runners, src, dest, cache_dir=work / "cache" / dest.rsplit("/", 1)[-1],  # type: ignore[arg-type]
                       relay_hosts=relay, slice_of=SLICE_OF if way == "two-level relay" else None)
    elapsed = time.perf_counter() - start
    for runner in runners:
        runner.close()
    if not result.ok:
        raise SystemExit(f"push failed: {[w.error for w in result.workers if w.error]}")
    return elapsed, result.bytes_sent, sum(r.crossings for r in runners)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tpuops-bench-slices-"))
    cluster = SshdCluster(work / "sshd", 4).start_all()
    try:
        src = work / "src"
        src.mkdir()
        samples: dict[str, list[tuple[float, int, int]]] = {way: [] for way in WAYS}
        for run in range(args.runs):
            (src / "weights.bin").write_bytes(os.urandom(args.mib << 20))  # a new tree each round: a first push
            for way in WAYS:
                samples[way].append(push(cluster, work, src, f"~/bench/{way.split()[0]}-{run}", way))
        payload = args.mib << 20
        print(f"{args.mib} MiB payload; 2 slices x 2 workers; {args.runs} rounds (medians)")
        print(f"{'way':<16} {'time s':>7} {'vs 2-level':>10} {'client sent':>12} {'x payload':>9} {'cross-slice':>11}")
        base = statistics.median(s[0] for s in samples[WAYS[0]])
        for way in WAYS:
            took = statistics.median(s[0] for s in samples[way])
            sent = statistics.median(s[1] for s in samples[way])
            crossings = statistics.median(s[2] for s in samples[way])
            print(f"{way:<16} {took:7.3f} {took / base:10.2f} {sent:12,.0f} {sent / payload:9.2f} {crossings:11.0f}")
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
