"""Fan-out: one task per worker, all at once, with bounded concurrency and per-worker results.

No more than `max_parallel` workers are connected to or worked on at the same time (pod slices refuse
some of many simultaneous SSH connections). A worker that fails or cannot be reached yields a result
with its error; it never stops the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from tpuops.errors import TpuopsError, UsageError
from tpuops.remote.base import Command, LineHandler, Runner, RunResult

DEFAULT_MAX_PARALLEL = 32


def run_each(
    runners: Sequence[Runner],
    task: Callable[[Runner], RunResult],
    max_parallel: int = DEFAULT_MAX_PARALLEL,
) -> list[RunResult]:
    """Call `task(runner)` for every runner, at most `max_parallel` at once; results in runner order."""
    if not runners:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(runners))),
                            thread_name_prefix="tpuops-worker") as pool:
        futures = [pool.submit(_guarded, runner, task) for runner in runners]
        return [future.result() for future in futures]


def _guarded(runner: Runner, task: Callable[[Runner], RunResult]) -> RunResult:
    started = time.monotonic()
    try:
        return task(runner)
    except UsageError:
        raise  # the same for every worker: report once, not N times
    except TpuopsError as err:
        return RunResult(runner.name, None, time.monotonic() - started, _name_worker(runner.name, str(err)))
    except Exception as err:  # noqa: BLE001  one worker's surprise must not stop the others
        message = f"{runner.name}: unexpected {type(err).__name__}: {err}"
        return RunResult(runner.name, None, time.monotonic() - started, message)


def _name_worker(worker: str, message: str) -> str:
    return message if message.startswith(f"{worker}:") else f"{worker}: {message}"


def exec_all(
    runners: Sequence[Runner],
    command: Command,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
    on_line: LineHandler | None = None,
    capture: bool = False,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    close: bool = True,
) -> list[RunResult]:
    """Run one command on every worker; each result says exit code, duration and error for its worker."""

    def one(runner: Runner) -> RunResult:
        try:
            return runner.run(command, env=env, cwd=cwd, timeout=timeout, on_line=on_line, capture=capture)
        finally:
            if close:
                runner.close()

    return run_each(runners, one, max_parallel)
