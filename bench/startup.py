"""CLI start-up: `tpuops --help` against a bare `python -c "import typer, pydantic"`, side by side.

Runs both commands alternately N times and prints medians and their ratio (goal: under 1.5).
Usage: python bench/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CANDIDATES = {
    "tpuops --help": [sys.executable, "-m", "tpuops", "--help"],
    "import typer, pydantic": [sys.executable, "-c", "import typer, pydantic"],
}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=60)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    samples: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    for argv in CANDIDATES.values():
        timed(argv)  # warm the page cache and .pyc files
    for _ in range(runs):
        for name, argv in CANDIDATES.items():  # alternate so both see the same machine load
            samples[name].append(timed(argv))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, median in medians.items():
        print(f"{name:<26} median {median * 1000:7.1f} ms over {runs} runs")
    ratio = medians["tpuops --help"] / medians["import typer, pydantic"]
    print(f"ratio tpuops/baseline: {ratio:.2f} (goal < 1.5)")


if __name__ == "__main__":
    main()
