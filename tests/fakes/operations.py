"""Long-running operations of the fakes: each finishes `seconds` after it started, lazily, on the next read.

With `running_reads` (the Compute fake sets it), an operation also answers RUNNING to its first reads (a get, or a
wait that returns before it is done, as Compute's does after a while) however soon it is due, so a client's wait is
always exercised; one nobody reads finishes `linger` seconds after it is due (the cloud works on unobserved)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CAPACITY_MESSAGE = (
    'There is no more capacity in the zone "{zone}"; you can try in another zone where Cloud TPU Nodes are '
    "offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1234]"
)


class OperationFailed(Exception):
    """Raised by an operation's completion: the operation ends with this error (gRPC code + message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class FakeOperation:
    name: str
    target: str
    done_at: float
    complete: Callable[[], Any]
    verb: str = "create"
    reads_left: int = 0  # reads still answered RUNNING (see Operations.running_reads)
    reads: int = 0  # how many times it was read (get or wait)
    done: bool = False
    response: Any = None
    error: OperationFailed | None = None


class Operations:
    """All operations of one fake; `lock` is the fake's model lock (completion mutates the model)."""

    def __init__(self, lock: threading.RLock, prefix: str, running_reads: int = 0, linger: float = 1.0) -> None:
        self.lock = lock
        self.prefix = prefix
        self.running_reads = running_reads
        self.linger = linger
        self._ops: dict[str, FakeOperation] = {}
        self._ids = itertools.count(1)

    def start(
        self, location: str, target: str, seconds: float, complete: Callable[[], Any], verb: str = "create"
    ) -> FakeOperation:
        with self.lock:
            name = f"{location}/operations/{self.prefix}-{next(self._ids)}"
            operation = FakeOperation(name, target, time.monotonic() + seconds, complete, verb,
                                      reads_left=self.running_reads)
            self._ops[name] = operation
            if seconds <= 0 and not operation.reads_left:
                self._finish(operation)
            elif operation.reads_left:
                self._finish_unobserved(operation, max(seconds, 0.0) + self.linger)
            return operation

    def get(self, name: str) -> FakeOperation | None:
        return self._read(name)[0]

    def all(self) -> list[FakeOperation]:
        with self.lock:
            return list(self._ops.values())

    def advance_due(self) -> None:
        """Finish every operation whose time has come: the cloud works on even when nobody polls."""
        with self.lock:
            now = time.monotonic()
            for operation in list(self._ops.values()):
                if not operation.done and not operation.reads_left and now >= operation.done_at:
                    self._finish(operation)

    def wait(self, name: str, at_most: float) -> FakeOperation | None:
        """Block until the operation is done or `at_most` seconds passed (Compute's operations.wait); a read still
        answered RUNNING returns at once."""
        deadline = time.monotonic() + at_most
        operation, held = self._read(name)
        while operation is not None and not held and not operation.done and time.monotonic() < deadline:
            time.sleep(min(0.02, max(0.0, operation.done_at - time.monotonic())))
            operation, held = self._read(name, count=False)
        return operation

    def _read(self, name: str, count: bool = True) -> tuple[FakeOperation | None, bool]:
        """The operation as a read finds it, and whether this read was one still answered RUNNING."""
        with self.lock:
            operation = self._ops.get(name)
            if operation is not None and count:
                operation.reads += 1
            if operation is None or operation.done:
                return operation, False
            if count and operation.reads_left:
                operation.reads_left -= 1
                return operation, True
            if not operation.reads_left and time.monotonic() >= operation.done_at:
                self._finish(operation)
            return operation, False

    def _finish_unobserved(self, operation: FakeOperation, after: float) -> None:
        def finish() -> None:
            with self.lock:
                if not operation.done:
                    self._finish(operation)

        timer = threading.Timer(after, finish)  # ends by itself, `linger` after the operation is due
        timer.daemon = True
        timer.start()

    def _finish(self, operation: FakeOperation) -> None:
        try:
            operation.response = operation.complete()
        except OperationFailed as failure:
            operation.error = failure
        operation.done = True
