"""`tpuops check` overhead: its wall time against running the same trainer for the same steps without it.

For each framework installed (JAX, PyTorch/XLA, TensorFlow), a tiny template model: `tpuops check SPEC --steps N`
versus the trainer command alone with TPUOPS_MAX_STEPS=N and the same XLA-on-CPU switches but no compile
reports (JAX_PLATFORMS=cpu, PJRT_DEVICE=CPU, TF jit_compile). Alternated, medians, ratio (goal: <= 1.2).
Usage: python bench/check.py [--runs 3] [--steps 20] [--framework jax]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "data" / "quickstart.txt"
FRAMEWORKS = {  # framework: (template, module, tiny-model flags, plain run's XLA switches)
    "jax": ("jax", "jax", "--dim 32 --layers 1 --heads 2 --block-size 32 --batch-size 4", {"JAX_PLATFORMS": "cpu"}),
    "pytorch": ("pytorch_xla", "torch_xla", "--dim 32 --layers 1 --heads 2 --block-size 32 --batch-size 4",
                {"PJRT_DEVICE": "CPU"}),
    "tensorflow": ("tensorflow", "tensorflow", "--dim 32 --layers 1 --heads 2 --max-len 64 --batch-size 4",
                   {"TPUOPS_PREFLIGHT": "1"}),  # the template jit-compiles its step under the preflight
}


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   timeout=900)
    return time.perf_counter() - start


def bench(framework: str, runs: int, steps: int, work: Path) -> tuple[float, float]:
    template, _, flags, switches = FRAMEWORKS[framework]
    code = ROOT / "templates" / template
    trainer = f"python3 train.py --data {CORPUS} {flags} --steps 100000"
    spec = work / f"{framework}.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: bench-{framework}
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        code: {{path: {code}}}
        trainer: {{framework: {framework}, command: {trainer}}}
        """))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    plain_env = {**env, **switches, "TPUOPS_MAX_STEPS": str(steps), "TPUOPS_LOGDIR": str(work / "logs")}
    check = [sys.executable, "-m", "tpuops", "check", str(spec), "--steps", str(steps), "-q"]
    plain = ["bash", "-c", trainer]
    checked, alone = [], []
    for _ in range(runs):  # alternate so both see the same machine load
        checked.append(timed(check, env, work))
        alone.append(timed(plain, plain_env, code))
    return statistics.median(checked), statistics.median(alone)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--framework", choices=list(FRAMEWORKS), action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        for framework in args.framework or list(FRAMEWORKS):
            if importlib.util.find_spec(FRAMEWORKS[framework][1]) is None:
                print(f"{framework:<11} skipped ({FRAMEWORKS[framework][1]} not installed)")
                continue
            checked, alone = bench(framework, args.runs, args.steps, Path(temp))
            print(f"{framework:<11} check {checked:6.1f} s   trainer alone {alone:6.1f} s   "
                  f"ratio {checked / alone:.2f} (goal <= 1.2; medians of {args.runs}, {args.steps} steps)")


if __name__ == "__main__":
    main()
