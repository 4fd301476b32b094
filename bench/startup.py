"""CLI start-up: `tpuops --help` against a bare `python -c "import typer, pydantic"`, side by side.

Runs both commands alternately N times and prints the medians of wall time and of CPU time (user + system of
the child: steadier than wall time on a shared machine) and their ratios (goal: under 1.2).
`python -X importtime -m tpuops --help` shows what is imported; tests/test_cli_foundation.py keeps the heavy
modules out of `--help`. Usage: python bench/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

CANDIDATES = {
    "tpuops --help": [sys.executable, "-m", "tpuops", "--help"],
    "import typer, pydantic": [sys.executable, "-c", "import typer, pydantic"],
}


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=60)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in CANDIDATES}
    for argv in CANDIDATES.values():
        timed(argv)  # warm the page cache and .pyc files
    for _ in range(runs):
        for name, argv in CANDIDATES.items():  # alternate so both see the same machine load
            samples[name].append(timed(argv))
    wall = {name: statistics.median(s[0] for s in values) for name, values in samples.items()}
    cpu = {name: statistics.median(s[1] for s in values) for name, values in samples.items()}
    for name in CANDIDATES:
        print(f"{name:<26} median {wall[name] * 1000:7.1f} ms wall, {cpu[name] * 1000:7.1f} ms CPU over {runs} runs")
    ours, base = "tpuops --help", "import typer, pydantic"
    print(f"ratio tpuops/baseline: {wall[ours] / wall[base]:.2f} wall, {cpu[ours] / cpu[base]:.2f} CPU (goal < 1.2)")


if __name__ == "__main__":
    main()
