"""The guard, measured on the local provider (no cloud needed):

1. resident memory of the guard process (`tpuops watch NAME --headless`) over a quiet minute: the largest
   VmRSS seen (goal: well under an e2-micro's 1 GB; the issue asks < 150 MB);
2. cloud calls per hour while all is well, counted on a real guard loop (in this process) at the default
   30 s poll and 60 s heartbeat: TPU describes, commands on the workers, and object reads, writes and listings
   in the bucket (lease, heartbeat, scalars);
3. time from a preemption (`tpuops simulate preempt`) to the relaunched trainer's first step, by the guard and
   by a laptop `tpuops watch`, side by side (the same loop in both: what differs is only where it runs).

Usage: python bench/guard.py [--interval 2] [--quiet 60] [--polls 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def tpuops(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tpuops", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def spec_file(work: Path) -> Path:
    text = (ROOT / "examples" / "quickstart.yaml").read_text()
    text = text.replace("../templates/charlm", str(ROOT / "templates" / "charlm"))
    text = text.replace("{from: data,", f"{{from: {ROOT / 'examples' / 'data'},")
    text = text.replace("--steps 1000", "--steps 200000 --checkpoint-every 100")
    path = work / "quickstart.yaml"
    path.write_text(text)
    return path


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ledger_events(home: Path) -> list[dict[str, Any]]:
    directory = home / "local" / "buckets" / "tpuops-quickstart" / ".tpuops" / "quickstart" / "guard" / "events"
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))
            if not p.name.startswith(".")] if directory.is_dir() else []  # not the store's own counters


def time_to_recover(env: dict[str, str], home: Path, timeout: float = 300) -> float:
    """From `simulate preempt` to the "recovered" event (the first step of the relaunched trainer, as read from
    its scalars by the recoverer)."""
    before = sum(1 for e in ledger_events(home) if e["kind"] == "recovered")
    start = time.time()
    assert tpuops(env, "simulate", "preempt", "quickstart").returncode == 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recovered = [e for e in ledger_events(home) if e["kind"] == "recovered"]
        if len(recovered) > before:
            return recovered[-1]["ts"] - start
        time.sleep(0.2)
    raise TimeoutError("no recovery")


def count_calls(env: dict[str, str], polls: int) -> Counter[str]:
    """One real guard loop in this process, its cloud and bucket calls counted per kind over `polls` polls."""
    os.environ.update(env)
    from tpuops.cloud.local.apis import LocalCloud
    from tpuops.context import Context
    from tpuops.ops import guard_loop as loop
    from tpuops.ops import launch
    from tpuops.ops.watch import WatchOptions
    from tpuops.providers.local import LocalProvider

    calls: Counter[str] = Counter()

    def counted(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[label] += 1
            return original(*args, **kwargs)
        setattr(owner, name, wrapper)

    for method in ("get_node", "get_queued"):
        counted(LocalCloud, method, f"tpu api {method}")
    original_store = LocalProvider.blob_store

    def blob_store(self: Any, url: str) -> Any:
        store = original_store(self, url)
        for method in ("list", "read_range", "read_versioned", "write_bytes"):
            counted(store, method, f"storage {method}")
        return store
    LocalProvider.blob_store = blob_store  # type: ignore[method-assign]
    counted(launch, "run_states", "commands on the workers (one fan-out)")
    ticks = {"n": 0}

    def sleep(seconds: float) -> None:
        ticks["n"] += 1
        if ticks["n"] > polls:
            raise KeyboardInterrupt
    options = WatchOptions(poll_interval=30.0)
    env_ctx = Context.from_env()
    with contextlib.suppress(KeyboardInterrupt):
        loop.watch_with_lease(env_ctx, "quickstart", options, role="watch", sleep=sleep)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=2.0, help="poll interval for the recovery timing")
    parser.add_argument("--quiet", type=float, default=60.0, help="seconds of RSS sampling")
    parser.add_argument("--polls", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        work = Path(tmp)
        home = work / "home"
        env = {**os.environ, "TPUOPS_HOME": str(home), "PYTHONPATH": str(ROOT),
               "TPUOPS_WATCH_INTERVAL": str(args.interval), "TPUOPS_WATCH_BACKOFF": "0.5",
               "TPUOPS_GUARD_HEARTBEAT": "60"}
        spec = spec_file(work)
        assert tpuops(env, "run", str(spec), "--detach").returncode == 0
        try:
            assert tpuops(env, "guard", "up", "quickstart").returncode == 0
            pid = int((home / "local" / "guards" / "quickstart" / "guard.pid").read_text())
            peak = 0.0
            deadline = time.monotonic() + args.quiet
            while time.monotonic() < deadline:
                peak = max(peak, rss_mb(pid))
                time.sleep(1)
            print(f"guard resident memory: {peak:.0f} MB peak over {args.quiet:.0f}s (goal < 150 MB)")
            guard_s = time_to_recover(env, home)
            assert tpuops(env, "guard", "down", "quickstart").returncode == 0
            laptop = subprocess.Popen([sys.executable, "-m", "tpuops", "watch", "quickstart"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(3 * args.interval)
                laptop_s = time_to_recover(env, home)
            finally:
                laptop.send_signal(signal.SIGINT)  # as Ctrl-C: it releases the lease on the way out
                laptop.wait(timeout=30)
            print(f"preemption -> relaunched trainer's first step (poll {args.interval:g}s): guard {guard_s:.1f}s, "
                  f"laptop watch {laptop_s:.1f}s")
            calls = count_calls(env, args.polls)
            per_hour = 3600 / 30.0 / args.polls
            print(f"calls per hour while all is well (30s poll, 60s heartbeat; {args.polls} polls counted):")
            for label, count in sorted(calls.items()):
                print(f"  {label:<44} {count * per_hour:7.0f}/h")
            # The lease keeper's thread runs on the wall clock, not on the loop's (skipped) sleeps: by design
            # one conditional write per poll and one heartbeat object a minute.
            by_design = {"storage write_bytes: lease renewal (1/poll)": args.polls,
                         "storage write_bytes: heartbeat (1/min)": args.polls // 2}
            for label, count in by_design.items():
                print(f"  {label:<44} {count * per_hour:7.0f}/h")
            calls.update(by_design)
            print(f"  {'total':<44} {sum(calls.values()) * per_hour:7.0f}/h")
        finally:
            tpuops(env, "down", "quickstart", "--yes", "--delete-bucket", "--force")


if __name__ == "__main__":
    main()
