"""The dashboard's start: `tpuops dashboard` until its page and its clusters' JSON answer, beside `tpuops status`
of the same cluster, on the local simulator (a throwaway TPUOPS_HOME with one cluster made by `tpuops up`).

Measured, alternately N times, medians printed:
  - dashboard page: from starting the process to the first 200 of GET / (what a browser waits for);
  - dashboard data: to the first 200 of GET /api/clusters (the table filled; the live status is read in the
    background, so the first answer may say "reading");
  - dashboard live: to the first /api/clusters that holds the TPU's live state;
  - `tpuops status NAME`: the whole command.
Usage: python bench/dashboard.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310  (loopback, ours)
            return response.read() if response.status == 200 else None
    except OSError:
        return None


def dashboard_start(env: dict[str, str]) -> tuple[float, float, float]:
    """Seconds to the page, to the clusters' JSON, to the clusters' JSON with a live TPU state."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "tpuops", "dashboard", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        page = data = live = None
        while time.perf_counter() - start < TIMEOUT_S:
            if page is None and get(base + "/") is not None:
                page = time.perf_counter() - start
            if page is not None:
                body = get(base + "/api/clusters")
                if body is not None:
                    data = data or time.perf_counter() - start
                    if all(c["tpu_state"] for c in json.loads(body)["clusters"]):
                        live = time.perf_counter() - start
                        break
            time.sleep(0.01)
        if page is None or data is None or live is None:
            raise SystemExit("the dashboard did not answer within a minute")
        return page, data, live
    finally:
        process.terminate()
        process.wait(timeout=30)


def status_time(env: dict[str, str], name: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tpuops", "status", name], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=TIMEOUT_S)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="tpuops-bench-dash-") as folder:
        env = {**os.environ, "TPUOPS_HOME": folder}
        spec = Path(folder) / "bench.yaml"
        spec.write_text(textwrap.dedent("""
            name: benchdash
            provider: local
            tpu: {type: v2-8}
            bucket: {name: benchdash-b}
            logs: {tensorboard: gs://benchdash-b/logs}
            trainer: {framework: jax, command: "sleep 1"}
            """))
        subprocess.run([sys.executable, "-m", "tpuops", "up", str(spec)], env=env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            samples: dict[str, list[float]] = {"dashboard page": [], "dashboard data": [], "dashboard live": [],
                                               "tpuops status": []}
            status_time(env, "benchdash")  # warm the page cache and .pyc files
            for _ in range(runs):
                page, data, live = dashboard_start(env)
                samples["dashboard page"].append(page)
                samples["dashboard data"].append(data)
                samples["dashboard live"].append(live)
                samples["tpuops status"].append(status_time(env, "benchdash"))
            for what, values in samples.items():
                print(f"{what:<16} median {statistics.median(values) * 1000:7.0f} ms  "
                      f"(min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f}) over {runs} runs")
        finally:
            subprocess.run([sys.executable, "-m", "tpuops", "down", "benchdash", "--yes", "--delete-bucket"],
                           env=env, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
