"""The line counter's overhead (tpuops/check/line_counter): each script run with and without it, alternately.

The counter traces with sys.settrace: every line of the code directory costs a call of its line tracer, every
Python call anywhere else (the frameworks, the standard library) one call of its global trace function that
answers "not ours" from a dict. The scripts below isolate each cost:

- start-up: an empty trainer (what loading the counter and writing its dump add to every process);
- loop in the code: a Python-heavy loop in the code directory (the worst case: every line traced);
- calls outside the code: a loop in the code that spends its time in pure-Python library calls (email parsing,
  json with Python objects, http.client's header parsing): the per-call cost outside the code directory;
- import numpy (when installed): a big library's import, thousands of Python calls outside the code;
- numpy work: array arithmetic in C from a short loop in the code (what a framework's step looks like from here);
- with --frameworks, `import torch` and `import jax` (those installed): the frameworks' own start-up;
- with --trainers, the templates' trainers (JAX, PyTorch/XLA, TensorFlow: those installed) for --steps steps on
  the CPU, as bench/check.py runs them alone: what counting costs a real preflight run.

Each round runs every script once with the counter and once without, the order alternating from round to round;
medians of the wall and CPU times (the process and its children), and their ratios. On a loaded machine single
runs vary by a lot: read the CPU columns, and use more --rounds.
Usage: python bench/check_lines.py [--rounds 5] [--frameworks] [--trainers [--steps 20]]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import check as check_bench  # noqa: E402  (bench/check.py: the templates' tiny-model flags)

from tpuops.check.lines import LineCounts, line_counting_env  # noqa: E402

SCRIPTS: dict[str, str] = {
    "start-up": "pass\n",
    "loop in the code": """\
        def collatz(n):
            steps = 0
            while n != 1:
                n = n // 2 if n % 2 == 0 else 3 * n + 1
                steps += 1
            return steps

        print(max(collatz(n) for n in range(1, 60_000)))
    """,
    "calls outside the code": """\
        import email.parser, http.client, io, json

        MESSAGE = "From: a@b\\nTo: c@d\\nSubject: s\\n\\nbody\\n"
        HEADERS = b"Content-Type: text/plain\\r\\nX-A: 1\\r\\nX-B: 2\\r\\n\\r\\n"
        parser = email.parser.Parser()
        for _ in range(3000):
            parser.parsestr(MESSAGE)
            http.client.parse_headers(io.BytesIO(HEADERS))
            json.dumps({"a": [1, 2.5, None], "b": {"c": "d"}}, indent=1)
    """,
}
NUMPY_SCRIPTS: dict[str, str] = {
    "import numpy": "import numpy\n",
    "numpy work": """\
        import numpy as np

        a = np.random.default_rng(0).standard_normal((300, 300))
        for _ in range(40):
            a = np.tanh(a @ a.T / 300.0)
        print(float(a.sum()))
    """,
}

FRAMEWORK_SCRIPTS: dict[str, str] = {"import torch": "import torch\n", "import jax": "import jax\n"}


def timed(argv: list[str], code: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU of the process and its children) in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=900, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compare(label: str, argv: list[str], code: Path, plain: dict[str, str], out: Path, rounds: int) -> None:
    """One line: the medians without and with the counter (alternating which goes first), their ratios."""
    counting = {**plain, **line_counting_env(code, out, plain.get("PYTHONPATH"))}
    timed(argv, code, plain)  # untimed: the page cache warm for both
    without: list[tuple[float, float]] = []
    counted: list[tuple[float, float]] = []
    for round_ in range(rounds):
        pair = [(without, plain), (counted, counting)]
        for times, env in pair if round_ % 2 == 0 else reversed(pair):
            times.append(timed(argv, code, env))
    lines = LineCounts.read(out)
    total = sum(lines.counts.values()) // max(rounds, 1)
    (wall_a, cpu_a), (wall_b, cpu_b) = medians(without), medians(counted)
    print(f"{label:<22} {wall_a:>7.2f}s {wall_b:>7.2f}s {wall_b / wall_a:>5.2f}x   {cpu_a:>7.2f}s {cpu_b:>7.2f}s "
          f"{cpu_b / cpu_a:>5.2f}x   {total:,} in {lines.processes // rounds}")


def medians(times: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(wall for wall, _ in times), statistics.median(cpu for _, cpu in times)


def bench_scripts(scripts: dict[str, str], rounds: int, work: Path) -> None:
    code = work / "code"
    code.mkdir()
    plain = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    for index, (label, source) in enumerate(scripts.items()):
        script = code / f"script_{index}.py"
        script.write_text(textwrap.dedent(source))
        compare(label, [sys.executable, script.name], code, plain, work / f"lines-{index}", rounds)


def bench_trainers(rounds: int, steps: int, work: Path) -> None:
    for framework, (template, module, flags, switches) in check_bench.FRAMEWORKS.items():
        if not installed(module):
            print(f"{framework:<22} skipped ({module} not installed)")
            continue
        code = ROOT / "templates" / template
        argv = ["bash", "-c", f"python3 train.py --data {check_bench.CORPUS} {flags} --steps 100000"]
        plain = {**{key: value for key, value in os.environ.items() if key != "PYTHONPATH"}, **switches,
                 "CUDA_VISIBLE_DEVICES": "", "TPUOPS_MAX_STEPS": str(steps), "TPUOPS_LOGDIR": str(work / "logs")}
        compare(f"{framework} trainer", argv, code, plain, work / f"lines-{framework}", rounds)


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frameworks", action="store_true", help="also time importing torch and jax")
    parser.add_argument("--trainers", action="store_true", help="also time the templates' trainers")
    parser.add_argument("--steps", type=int, default=20, help="the trainers' steps")
    args = parser.parse_args()
    scripts = dict(SCRIPTS)
    if installed("numpy"):
        scripts.update(NUMPY_SCRIPTS)
    if args.frameworks:
        scripts.update({label: source for label, source in FRAMEWORK_SCRIPTS.items() if installed(label.split()[1])})
    print(f"Python {sys.version.split()[0]}, {args.rounds} rounds, medians")
    print(f"{'':<22} {'wall: without, with, ratio':>26}   {'CPU: without, with, ratio':>25}   lines counted in "
          "process(es), per run")
    with tempfile.TemporaryDirectory(prefix="tpuops-bench-lines-") as work:
        bench_scripts(scripts, args.rounds, Path(work))
        if args.trainers:
            bench_trainers(args.rounds, args.steps, Path(work))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
