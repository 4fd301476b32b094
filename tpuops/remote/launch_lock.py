"""A cluster's launch lock, held on worker 0: two launches of one cluster never both start.

The lock lives on the worker, not on the laptop, because launches of one cluster may come from several
machines (or several terminals with their own TPUOPS_HOME): worker 0 is the one place they all reach. It is
flock(1) held by a process on worker 0 (`shipped/lock.sh`) that lives as long as this side keeps its session
open and its heartbeat coming, so a launcher that dies (killed, crashed, its laptop gone) can never leave a
lock behind: its session closes, or its heartbeat stops for `TTL_SECONDS`, and the kernel lets go of the lock.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tpuops.errors import RemoteError, TpuopsError
from tpuops.remote.base import Runner, RunResult
from tpuops.shipped import script_command

HEARTBEAT_SECONDS = 5.0
TTL_SECONDS = 60  # a holder whose launcher sent nothing this long lets go (its machine vanished mid-launch)
ANSWER_SECONDS = 120.0  # beyond the runner's own connect timeout: a worker that connects but never answers
RELEASE_JOIN_SECONDS = 10.0


@dataclass(frozen=True)
class LockOwner:
    """A launch as the lock records it: its run, when it took the lock, and from where (user@host)."""

    run_id: str
    since: float  # seconds since the epoch
    origin: str

    @classmethod
    def parse(cls, words: list[str]) -> LockOwner | None:
        if len(words) < 3 or not words[1].isdigit():
            return None
        return cls(words[0], float(words[1]), words[2])

    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))


class LockBusy(TpuopsError):
    """Another launch of the cluster holds the lock (`owner`: which, when it could be read)."""

    def __init__(self, owner: LockOwner | None) -> None:
        super().__init__("the launch lock is held")
        self.owner = owner


class LaunchLock:
    """Take with `acquire()` (or `with`), let go with `release()`; the holder on the worker ends either way."""

    def __init__(self, runner: Runner, cluster: str, run_id: str, origin: str, *, wait: float = 0.0,
                 on_waiting: Callable[[LockOwner | None], None] | None = None) -> None:
        self.runner, self.cluster, self.run_id = runner, cluster, run_id
        self.origin = "".join(origin.split()) or "?"  # one word in the lock's record
        self.wait, self.on_waiting = wait, on_waiting
        self._answers: queue.Queue[tuple[str, object]] = queue.Queue()
        self._released = threading.Event()
        self._thread: threading.Thread | None = None
        self._stderr: list[str] = []

    def __enter__(self) -> LockOwner | None:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> LockOwner | None:
        """Take the lock; returns the launch that held it last (None: none recorded). Raises LockBusy when
        another launch holds it (after waiting up to `wait` seconds), RemoteError when the worker cannot."""
        argv = script_command("lock", self.cluster, self.run_id, self.origin, str(int(self.wait)), str(TTL_SECONDS))
        self._thread = threading.Thread(target=self._hold, args=(argv,), name="tpuops-launch-lock", daemon=True)
        self._thread.start()
        try:
            return self._answer(ANSWER_SECONDS + self.wait)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        self._released.set()  # the heartbeat ends, our stdin closes: the holder exits and the kernel lets go
        if self._thread is not None:
            self._thread.join(timeout=RELEASE_JOIN_SECONDS)

    def _answer(self, limit: float) -> LockOwner | None:
        deadline = time.monotonic() + limit
        while True:
            try:
                kind, payload = self._answers.get(timeout=0.2)  # short waits: Ctrl-C lands at once
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RemoteError(f"{self.runner.name}: no answer about the launch lock within {limit:.0f} s",
                                      "try again; check the worker with `tpuops exec`") from None
                continue
            if kind == "end":
                raise self._failure(payload)  # type: ignore[arg-type]
            words = str(payload).split()
            if words and words[0] == "acquired":
                return LockOwner.parse(words[1:])
            if words and words[0] == "waiting" and self.on_waiting is not None:
                self.on_waiting(LockOwner.parse(words[1:]))
            elif words and words[0] == "busy":
                raise LockBusy(LockOwner.parse(words[1:]))

    def _failure(self, result: RunResult) -> RemoteError:
        if result.error:
            return RemoteError(result.error)  # it names the worker and what to do
        said = "; ".join(self._stderr[-3:]) or f"exit {result.exit_code}"
        return RemoteError(f"{self.runner.name}: could not take the launch lock: {said}")

    def _hold(self, argv: list[str]) -> None:
        def line(_worker: str, stream: str, text: str) -> None:
            if stream == "stdout":
                self._answers.put(("line", text))
            else:
                self._stderr.append(text)

        try:
            result = self.runner.run(argv, stdin=self._heartbeats(), on_line=line)
        except Exception as err:  # noqa: BLE001  handed to the waiting thread
            result = RunResult(self.runner.name, None, 0.0, f"{self.runner.name}: {err}")
        self._answers.put(("end", result))

    def _heartbeats(self) -> Iterator[bytes]:
        while not self._released.wait(HEARTBEAT_SECONDS):
            yield b"."
