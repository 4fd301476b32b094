"""Long-running operations of the fakes: each finishes `seconds` after it started, lazily, on the next read."""

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
    done: bool = False
    response: Any = None
    error: OperationFailed | None = None


class Operations:
    """All operations of one fake; `lock` is the fake's model lock (completion mutates the model)."""

    def __init__(self, lock: threading.RLock, prefix: str) -> None:
        self.lock = lock
        self.prefix = prefix
        self._ops: dict[str, FakeOperation] = {}
        self._ids = itertools.count(1)

    def start(
        self, location: str, target: str, seconds: float, complete: Callable[[], Any], verb: str = "create"
    ) -> FakeOperation:
        with self.lock:
            name = f"{location}/operations/{self.prefix}-{next(self._ids)}"
            operation = FakeOperation(name, target, time.monotonic() + seconds, complete, verb)
            self._ops[name] = operation
            if seconds <= 0:
                self._finish(operation)
            return operation

    def get(self, name: str) -> FakeOperation | None:
        with self.lock:
            operation = self._ops.get(name)
            if operation is not None and not operation.done and time.monotonic() >= operation.done_at:
                self._finish(operation)
            return operation

    def advance_due(self) -> None:
        """Finish every operation whose time has come: the cloud works on even when nobody polls."""
        with self.lock:
            now = time.monotonic()
            for operation in list(self._ops.values()):
                if not operation.done and now >= operation.done_at:
                    self._finish(operation)

    def wait(self, name: str, at_most: float) -> FakeOperation | None:
        """Block until the operation is done or `at_most` seconds passed (Compute's operations.wait)."""
        deadline = time.monotonic() + at_most
        while True:
            operation = self.get(name)
            if operation is None or operation.done or time.monotonic() >= deadline:
                return operation
            time.sleep(min(0.02, max(0.0, operation.done_at - time.monotonic())))

    def _finish(self, operation: FakeOperation) -> None:
        try:
            operation.response = operation.complete()
        except OperationFailed as failure:
            operation.error = failure
        operation.done = True
