"""Retry policies (tenacity), in one place.

Adapters translate SDK exceptions into `TransientError` / `CapacityError` (tpuops.errors); the policies
here only look at those types, so they stay free of Google imports. Sleep is injectable for tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_fixed,
    wait_random,
)
from tenacity.wait import wait_base

from tpuops.errors import TransientError

T = TypeVar("T")


def backoff(initial: float, maximum: float) -> wait_base:
    """Exponential backoff from `initial` to `maximum` seconds, plus up to a second of jitter."""
    return wait_exponential(multiplier=initial, max=maximum) + wait_random(0, 1)


def transient(
    attempts: int = 6,
    initial: float = 1.0,
    maximum: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Retrying:
    """Retry 429/500/503/deadline (as TransientError) with exponential backoff and jitter, bounded."""
    return Retrying(
        retry=retry_if_exception_type(TransientError),
        wait=backoff(initial, maximum),
        stop=stop_after_attempt(attempts),
        sleep=sleep,
        reraise=True,
    )


def call_transient(fn: Callable[[], T], policy: Retrying | None = None) -> T:
    return (policy or transient())(fn)


def bounded_by(seconds: float, initial: float = 2.0, maximum: float = 60.0,
               sleep: Callable[[float], None] = time.sleep,
               retry_on: type[BaseException] | tuple[type[BaseException], ...] = TransientError) -> Retrying:
    """Retry `retry_on` for at most `seconds` of wall time (used for capacity waits and boot waits)."""
    return Retrying(
        retry=retry_if_exception_type(retry_on),
        wait=backoff(initial, maximum),
        stop=stop_after_delay(seconds),
        sleep=sleep,
        reraise=True,
    )


def poll(fetch: Callable[[], T], done: Callable[[T], bool], *, interval: float, timeout: float,
         on_timeout: Callable[[], BaseException], also_retry: tuple[type[BaseException], ...] = (),
         sleep: Callable[[float], None] = time.sleep) -> T:
    """Call `fetch` every `interval` seconds until `done(result)`, polling through `also_retry` errors.

    After `timeout` seconds: the last call's error if it raised one, else `on_timeout()`."""

    def give_up(state: RetryCallState) -> T:
        if state.outcome is not None and state.outcome.failed:
            raise state.outcome.exception()  # type: ignore[misc]
        raise on_timeout()

    policy = Retrying(
        retry=retry_if_result(lambda value: not done(value)) | retry_if_exception_type(also_retry),
        wait=wait_fixed(interval),
        stop=stop_after_delay(timeout),
        sleep=sleep,
        retry_error_callback=give_up,
    )
    return policy(fetch)
