"""Fan-out: one task per worker, all at once, with bounded concurrency and per-worker results.

No more than `max_parallel` workers are connected to or worked on at the same time (pod slices refuse
some of many simultaneous SSH connections). A worker that fails or cannot be reached yields a result
with its error; it never stops the others. Ctrl-C, a closed stdout or a cancel request stop them all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress

from tpuops.errors import TpuopsError, UsageError
from tpuops.remote.base import Command, LineHandler, OutputClosed, Runner, RunResult

DEFAULT_MAX_PARALLEL = 32


def run_each(
    runners: Sequence[Runner],
    task: Callable[[Runner], RunResult],
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    cancel: threading.Event | None = None,
) -> list[RunResult]:
    """Call `task(runner)` for every runner, at most `max_parallel` at once; results in runner order.

    The threads are daemons and this thread waits in short slices, so Ctrl-C lands here at once: every
    runner is then cancelled (its command signalled on the worker) and KeyboardInterrupt goes on up. Setting
    `cancel` (from another thread) does the same and raises `Cancelled`; a handler's OutputClosed (our
    stdout closed) stops every worker too and is raised here.
    """
    if not runners:
        return []
    pool = _Pool(runners, task, max(1, min(max_parallel, len(runners))))
    try:
        while not pool.finished.wait(WAIT_SLICE_SECONDS):
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled")
        if pool.fatal:
            raise pool.fatal[0]
    except BaseException:
        pool.cancel()
        raise
    return [result for result in pool.results if result is not None]


class Cancelled(Exception):  # noqa: N818  (a request, not an error)
    """run_each was asked to stop from another thread (its `cancel` event); the runners were cancelled."""


WAIT_SLICE_SECONDS = 0.2
CANCEL_JOIN_SECONDS = 5.0  # how long a cancelled fan-out waits for its threads before leaving them (daemons)


class _Pool:
    """`size` daemon threads working through the runners; `finished` is set when all are done or one
    raised what must stop everything (UsageError, OutputClosed, anything unexpected in a handler)."""

    def __init__(self, runners: Sequence[Runner], task: Callable[[Runner], RunResult], size: int) -> None:
        self.runners, self.task = runners, task
        self.results: list[RunResult | None] = [None] * len(runners)
        self.fatal: list[BaseException] = []
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self._left = len(runners)
        self._threads = [threading.Thread(target=self._work, name=f"tpuops-worker-{i}", daemon=True)
                         for i in range(size)]
        for thread in self._threads:
            thread.start()

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= len(self.runners) or self.fatal:
                return None
            self._next += 1
            return self._next - 1

    def _work(self) -> None:
        while (index := self._take()) is not None:
            try:
                self.results[index] = _guarded(self.runners[index], self.task)
            except BaseException as err:  # noqa: BLE001  handed to the waiting thread, which raises it
                with self._lock:
                    self.fatal.append(err)
                self.finished.set()
                return
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self.finished.set()

    def cancel(self) -> None:
        with self._lock:
            self._next = len(self.runners)  # nothing new starts
        for runner in self.runners:
            cancel_runner(runner)
        deadline = time.monotonic() + CANCEL_JOIN_SECONDS
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def cancel_runner(runner: Runner) -> None:
    with suppress(Exception):  # best effort: we are stopping anyway
        runner.cancel()


def _guarded(runner: Runner, task: Callable[[Runner], RunResult]) -> RunResult:
    started = time.monotonic()
    try:
        return task(runner)
    except (UsageError, OutputClosed):
        raise  # the same for every worker: report once, not N times; or: nobody reads our output any more
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
    cancel: threading.Event | None = None,
) -> list[RunResult]:
    """Run one command on every worker; each result says exit code, duration and error for its worker."""

    def one(runner: Runner) -> RunResult:
        try:
            return runner.run(command, env=env, cwd=cwd, timeout=timeout, on_line=on_line, capture=capture)
        finally:
            if close:
                runner.close()

    return run_each(runners, one, max_parallel, cancel)
