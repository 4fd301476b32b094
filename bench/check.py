"""`tpuops check` overhead: its wall time against running the same trainer for the same steps without it, and
the lint's time on a large code directory.

Run mode, for each framework installed (JAX, PyTorch/XLA, TensorFlow), a tiny template model, four ways
(medians; one untimed run first so that the framework's libraries are in the page cache, and the order rotated
from round to round so that no way always runs first after another): the trainer alone with TPUOPS_MAX_STEPS=N
and the plain XLA-on-CPU switches (JAX_PLATFORMS=cpu, PJRT_DEVICE=CPU, TF jit_compile); the trainer alone with
the compile reports `check` turns on as well (JAX_LOG_COMPILES..., PT_XLA_DEBUG_LEVEL + XLA_METRICS_FILE,
TF_CPP_VMODULE=device_compiler=3); and `tpuops check SPEC --steps N`. "reports" is the run's own slowdown from
the frameworks' compile reports, "check" what tpuops adds on top (start-up, lint, workspace copy, reading the
output); the goal is total <= 1.2. "fixed" is `tpuops check` of a trainer that does nothing (`true`): what
tpuops costs by itself, whatever the trainer. On a loaded machine the wall times of single runs vary by a few
seconds: read the CPU line, and use more --runs.

Lint mode (`--lint-lines 20000`): the check corpus (tests/check_corpus) copied until it has that many lines,
`tpuops check SPEC --no-run` timed as a whole process (wall and CPU: on a loaded machine the CPU time is the
steadier figure), next to `tpuops --version` (the CLI's own start-up). Goal: under 2 s.
Usage: python bench/check.py [--runs 3] [--steps 20] [--framework jax] [--lint-lines 20000]
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

from tpuops.check.run import FRAMEWORK_ENV  # noqa: E402

CORPUS = ROOT / "examples" / "data" / "quickstart.txt"
CHECK_CORPUS = ROOT / "tests" / "check_corpus"
FRAMEWORKS = {  # framework: (template, module, tiny-model flags, plain run's XLA switches)
    "jax": ("jax", "jax", "--dim 32 --layers 1 --heads 2 --block-size 32 --batch-size 4", {"JAX_PLATFORMS": "cpu"}),
    "pytorch": ("pytorch_xla", "torch_xla", "--dim 32 --layers 1 --heads 2 --block-size 32 --batch-size 4",
                {"PJRT_DEVICE": "CPU"}),
    "tensorflow": ("tensorflow", "tensorflow", "--dim 32 --layers 1 --heads 2 --max-len 64 --batch-size 4",
                   {"TPUOPS_PREFLIGHT": "1"}),  # the template jit-compiles its step under the preflight
}


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU of the process and its children) in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def write_spec(path: Path, framework: str, code: Path, command: str) -> Path:
    path.write_text(textwrap.dedent(f"""
        name: bench-{framework}
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        code: {{path: {code}}}
        trainer: {{framework: {framework}, command: {command}}}
        """))
    return path


def bench(framework: str, runs: int, steps: int, work: Path) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) of each way: "check", "alone", "reports", "fixed"."""
    template, _, flags, switches = FRAMEWORKS[framework]
    code = ROOT / "templates" / template
    trainer = f"python3 train.py --data {CORPUS} {flags} --steps 100000"
    spec = write_spec(work / f"{framework}.yaml", framework, code, trainer)
    idle = write_spec(work / f"{framework}-idle.yaml", framework, code, "true")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    plain_env = {**env, **switches, "TPUOPS_MAX_STEPS": str(steps), "TPUOPS_LOGDIR": str(work / "logs")}
    reports_env = {**plain_env, **FRAMEWORK_ENV[framework], "TPUOPS_PREFLIGHT": "1"}
    if framework == "pytorch":
        reports_env["XLA_METRICS_FILE"] = str(work / "xla-metrics.txt")
    check = [sys.executable, "-m", "tpuops", "check", str(spec), "--steps", str(steps), "-q"]
    plain = ["bash", "-c", trainer]
    ways = {"check": (check, env, work), "alone": (plain, plain_env, code), "reports": (plain, reports_env, code),
            "fixed": ([sys.executable, "-m", "tpuops", "check", str(idle), "-q"], env, work)}
    timed(plain, plain_env, code)  # warm-up: the first run of a framework reads its libraries from disk
    times: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
    order = list(ways)
    for round_ in range(runs):  # alternate so that all see the same machine load, in a rotating order
        for way in order[round_ % len(order):] + order[:round_ % len(order)]:
            argv, way_env, cwd = ways[way]
            times[way].append(timed(argv, way_env, cwd))
            (work / "xla-metrics.txt").unlink(missing_ok=True)
    return {way: (statistics.median(w for w, _ in runs_), statistics.median(c for _, c in runs_))
            for way, runs_ in times.items()}


def corpus_tree(root: Path, lines: int) -> int:
    """The check corpus copied under `root` until it has `lines` lines; returns the line count."""
    total, copy = 0, 0
    sources = sorted(CHECK_CORPUS.rglob("*.py"))
    while total < lines:
        for source in sources:
            target = root / f"copy{copy}" / source.relative_to(CHECK_CORPUS)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = source.read_text()
            target.write_text(text)
            total += text.count("\n")
        copy += 1
    return total


def bench_lint(lines: int, runs: int, work: Path) -> None:
    code = work / "code"
    total = corpus_tree(code, lines)
    files = sum(1 for _ in code.rglob("*.py"))
    spec = work / "lint.yaml"
    spec.write_text(f"name: bench-lint\nprovider: local\ntpu: {{type: v2-8, workers: 1}}\ncode: {{path: {code}}}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    lint = [timed([sys.executable, "-m", "tpuops", "check", str(spec), "--no-run"], env, work) for _ in range(runs)]
    start = [timed([sys.executable, "-m", "tpuops", "--version"], env, work) for _ in range(runs)]
    wall, cpu = statistics.median(w for w, _ in lint), statistics.median(c for _, c in lint)
    print(f"lint        {total:,} lines in {files} files: check --no-run {wall:.2f} s wall, {cpu:.2f} s CPU "
          f"(tpuops --version alone: {statistics.median(w for w, _ in start):.2f} s wall, "
          f"{statistics.median(c for _, c in start):.2f} s CPU; goal < 2 s; load average {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--framework", choices=list(FRAMEWORKS), action="append")
    parser.add_argument("--lint-lines", type=int, help="only time the lint on a generated tree of this many lines")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        if args.lint_lines:
            bench_lint(args.lint_lines, args.runs, Path(temp))
            return
        for framework in args.framework or list(FRAMEWORKS):
            if importlib.util.find_spec(FRAMEWORKS[framework][1]) is None:
                print(f"{framework:<11} skipped ({FRAMEWORKS[framework][1]} not installed)")
                continue
            result = bench(framework, args.runs, args.steps, Path(temp))
            for index, unit in ((0, "wall"), (1, "CPU ")):
                check, alone, reports, fixed = (result[way][index] for way in ("check", "alone", "reports", "fixed"))
                print(f"{framework:<11} {unit} check {check:6.1f} s   trainer alone {alone:6.1f} s   with the "
                      f"compile reports {reports:6.1f} s   ratio {check / alone:.2f} = reports {reports / alone:.2f}"
                      f" x check {check / reports:.2f} (goal <= 1.2; medians of {args.runs}, {args.steps} steps;"
                      f" fixed cost of check {fixed:.2f} s)")
            print(f"{'':<11} load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
