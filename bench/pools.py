"""Recovery across pools, measured on the local simulator (no cloud needed).

Time from a zone going out of capacity to the run stepping again, side by side:

- one pool: the zone is out of capacity for `--outage` seconds (`tpuops simulate stockout`) when the TPU is
  preempted; the guard can only wait for the zone to come back (re-creating there until it has room);
- two pools (the second in another region, `tpu.move_after: 0s`): the same outage and preemption; the guard
  moves the run to the second pool, copies its checkpoint there, and the trainer resumes from its step.

Each measure runs from `simulate stockout` + `simulate preempt` to the guard's "recovered" event (the first step
of the relaunched trainer, read from its scalars). Medians of `--rounds` rounds, each on a fresh cluster.

Usage: python bench/pools.py [--rounds 3] [--outage 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIRST, NEXT = "sim-west1-a", "sim-east1-b"
FAST = {"TPUOPS_WATCH_INTERVAL": "0.5", "TPUOPS_WATCH_BACKOFF": "0.5", "TPUOPS_GUARD_HEARTBEAT": "1"}


def tpuops(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tpuops", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def spec_text(name: str, pools: int) -> str:
    zones = [FIRST, NEXT][:pools]
    listed = ", ".join(f"{{type: v2-8, zone: {zone}, provisioning: spot}}" for zone in zones)
    return f"""
name: {name}
provider: local
tpu:
  pools: [{listed}]
  workers: 2
  move_after: 0s
bucket: {{name: "{name}-{{region}}"}}
code: {{path: {ROOT / "templates" / "charlm"}}}
data: [{{from: {ROOT / "examples" / "data"}, to: data}}]
trainer:
  framework: jax
  command: python3 train.py --data ~/data/quickstart.txt --steps 200000 --checkpoint-every 100
  checkpoints: gs://{name}-{{region}}/checkpoints
logs: {{tensorboard: "gs://{name}-sim-west1/logs"}}
"""


def events(home: Path, name: str) -> list[dict[str, Any]]:
    directory = home / "local" / "buckets" / f"{name}-sim-west1" / ".tpuops" / name / "guard" / "events"
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))
            if not p.name.startswith(".")] if directory.is_dir() else []


def wait_for(condition: Any, what: str, timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(what)


def one_round(pools: int, outage: float, index: int) -> tuple[float, str]:
    """Seconds from stockout + preemption to the recovered event, and the pool the run ended in."""
    with tempfile.TemporaryDirectory(prefix="tpuops-bench-pools-") as work:
        home = Path(work) / "home"
        env = {**os.environ, **FAST, "TPUOPS_HOME": str(home), "PYTHONPATH": str(ROOT)}
        (home / "local").mkdir(parents=True)
        grant = [{"generation": "v2", "kind": "spot", "zone": zone, "limit": 8} for zone in (FIRST, NEXT)]
        (home / "local" / "quota.json").write_text(json.dumps({"limits": grant}))
        name = f"bench{pools}p{index}"
        spec = Path(work) / "spec.yaml"
        spec.write_text(spec_text(name, pools))
        try:
            started = tpuops(env, "run", str(spec), "--detach")
            assert started.returncode == 0, started.stderr[-2000:]
            assert tpuops(env, "guard", "up", name).returncode == 0
            checkpoints = home / "local" / "buckets" / f"{name}-sim-west1" / "checkpoints"
            wait_for(lambda: checkpoints.is_dir() and any(checkpoints.iterdir()), "a checkpoint")
            wait_for(lambda: any(e["kind"] == "watch" for e in events(home, name)), "the guard watching")
            start = time.time()
            assert tpuops(env, "simulate", "stockout", FIRST, "--for", f"{outage:g}s").returncode == 0
            assert tpuops(env, "simulate", "preempt", name).returncode == 0
            recovered = wait_for(lambda: [e for e in events(home, name) if e["kind"] == "recovered"],
                                 "the recovery", timeout=outage + 300)
            state = json.loads((home / "clusters" / name / "state.json").read_text())
            return recovered[0]["ts"] - start, state.get("pool") or "-"
        finally:
            tpuops(env, "guard", "down", name)
            tpuops(env, "down", name, "--yes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--outage", type=float, default=20.0, help="seconds the first zone is out of capacity")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    for label, pools in (("one pool (waits for its zone)", 1), ("two pools (moves to the next)", 2)):
        for index in range(args.rounds):
            seconds, pool = one_round(pools, args.outage, index)
            results.setdefault(label, []).append(seconds)
            print(f"{label}: round {index + 1}: {seconds:.1f}s, ended in {pool}", flush=True)
    print(f"\nzone out of capacity for {args.outage:g}s, preempted; time to the run stepping again "
          f"(median of {args.rounds}):")
    for label, values in results.items():
        print(f"  {label:<32} {statistics.median(values):6.1f}s   (each: {', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
