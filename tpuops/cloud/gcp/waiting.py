"""Calling Google APIs with our retry policy and waiting on their long-running operations.

google-cloud-tpu configures no retry on any method, so every call and every poll goes through
`Timing.call`, a tenacity policy on TransientError (errors are translated first). Operation waits are
tenacity loops too: one mechanism for all of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tpuops import retry
from tpuops.cloud.gcp.deadline import ApiDeadline
from tpuops.cloud.gcp.errors import translate, translated
from tpuops.errors import CloudError, TransientError

T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    """How often to poll, how long to wait, how to back off. Tests shrink these through the environment."""

    poll_interval: float = 5.0
    operation_timeout: float = 1800.0
    retry_initial: float = 1.0
    retry_attempts: int = 6
    sleep: Callable[[float], None] = time.sleep
    deadline: ApiDeadline = field(default_factory=ApiDeadline)  # for endpoints that do not answer at all

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Timing:
        return cls(
            poll_interval=float(env.get("TPUOPS_POLL_INTERVAL", cls.poll_interval)),
            operation_timeout=float(env.get("TPUOPS_OPERATION_TIMEOUT", cls.operation_timeout)),
            retry_initial=float(env.get("TPUOPS_RETRY_INITIAL", cls.retry_initial)),
            deadline=ApiDeadline.from_env(env),
        )

    def call(self, fn: Callable[[], T], what: str, api: str, server_wait: float = 0.0) -> T:
        """One API call, translated, retried while transient (`server_wait`: see ApiDeadline.run)."""

        def attempt() -> T:
            with translated(what, api):
                return self.deadline.run(fn, what, api, server_wait=server_wait)

        return self.retry_transient(attempt)

    def retry_transient(self, fn: Callable[[], T]) -> T:
        """Retry `fn` (already translating its errors) while it raises TransientError: e.g. create-and-wait,
        when the operation itself failed with UNAVAILABLE or INTERNAL."""
        policy = retry.transient(
            attempts=self.retry_attempts, initial=self.retry_initial, maximum=self.retry_initial * 30, sleep=self.sleep
        )
        return retry.call_transient(fn, policy)

    def create_and_wait(self, create: Callable[[], Any], what: str, api: str) -> None:
        """Start a create and wait for its operation, all again if the operation failed transiently.

        `create` returns None when the resource already exists (an earlier attempt got through after all)."""

        def attempt() -> None:
            operation = self.call(create, what, api)
            if operation is not None:
                self.wait_operation(operation, what, api)

        self.retry_transient(attempt)

    def poll_until(self, check: Callable[[], T | None], what: str, timeout: float | None = None,
                   timed_out: Callable[[], CloudError] | None = None) -> T:
        """Call `check` every poll interval until it returns something; transient errors are polled through.
        `timed_out`: the error when `timeout` passes (else: still not done)."""
        limit = self.operation_timeout if timeout is None else timeout
        return retry.poll(  # type: ignore[return-value]
            check, lambda value: value is not None, interval=self.poll_interval, timeout=limit,
            also_retry=(TransientError,), sleep=self.sleep,
            on_timeout=timed_out or (lambda: CloudError(f"{what}: still not done after {limit:.0f}s",
                                                        "check the resource in the console and rerun")),
        )

    def wait_operation(self, future: Any, what: str, api: str) -> Any:
        """Wait on a google.api_core Operation future; its error translated (capacity, transient, ...)."""

        def done() -> bool | None:
            with translated(f"{what} (polling)", api):
                return True if self.deadline.run(lambda: future.done(retry=None), what, api) else None

        self.poll_until(done, what)
        error = future.exception()
        if error is not None:
            raise translate(error, what, api, from_operation=True)
        return future.result()
