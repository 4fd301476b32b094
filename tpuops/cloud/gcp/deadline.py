"""One deadline for Google endpoints that do not answer, the same for every command.

Offline, a refused connection or a name that does not resolve is a TransientError, and the retry policy
(six attempts, backoff to 30 s) made each call of a search take half a minute, silently: `status NAME` and
`down NAME` sat for two minutes. And a socket that accepts but never answers (a dead proxy, a blackhole
route) hung for good, since the TPU and Compute SDKs send their requests with no timeout.

So every Google call runs against one clock per API: from the first call that found no answer (connection
failed, or nothing came back), calls keep being retried for `TPUOPS_API_DEADLINE` seconds (30), then the
command fails with one line naming the API, its address and why. Any answer, even an HTTP error, restarts
the clock: an API that answers 503 is busy, not unreachable, and keeps the retry policy it had.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tpuops.cloud.gcp.clients import Endpoints, building_clients
from tpuops.cloud.gcp.errors import is_connection_error
from tpuops.errors import UnreachableError

T = TypeVar("T")

DEADLINE_ENV = "TPUOPS_API_DEADLINE"
DEFAULT_SECONDS = 30.0
LAST_TRY_S = 5.0  # how long a call may wait once the API has been silent for the whole deadline
DEFAULT_HOSTS = {"tpu": "tpu.googleapis.com", "compute": "compute.googleapis.com", "storage": "storage.googleapis.com"}
HINT = ("check the network connection (DNS, proxy, VPN) or the CLOUDSDK_API_ENDPOINT_OVERRIDES_* endpoints; "
        f"{DEADLINE_ENV}=SECONDS waits longer")

_quiet_since: dict[str, float] = {}  # api -> since when it has not answered (process-wide: one network)
_lock = threading.Lock()


class NoAnswer(TimeoutError):
    """A request sent but not answered within the deadline (its thread is left to the process's exit)."""


class ApiDeadline:
    def __init__(self, seconds: float = DEFAULT_SECONDS, hosts: Mapping[str, str | None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.seconds = seconds
        self.hosts = {**DEFAULT_HOSTS, **{api: host for api, host in (hosts or {}).items() if host}}
        self.clock = clock
        self.sleep = sleep

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApiDeadline:
        endpoints = Endpoints.from_env(env)
        hosts = {"tpu": endpoints.tpu, "compute": endpoints.compute, "storage": endpoints.storage}
        return cls(float(env.get(DEADLINE_ENV) or DEFAULT_SECONDS),
                   {api: urlsplit(url).netloc for api, url in hosts.items() if url})

    def run(self, fn: Callable[[], T], what: str, api: str, *, bounded: bool = True, server_wait: float = 0.0) -> T:
        """`fn` (one SDK request), tried again while `api` does not answer; UnreachableError at the deadline.

        bounded: wait for the answer at most the time left (for SDKs that send without a timeout), plus
        `server_wait` for a request the server holds on purpose (Compute's operation wait: up to 2 minutes)."""
        pause = 0.5
        while True:
            sent = self.clock()
            # Past the deadline already (an earlier call found the API silent): one short try, then the line.
            wait = self._left(api) or min(self.seconds, LAST_TRY_S)
            try:
                result = _answer_within(fn, wait + server_wait) if bounded else fn()
            except Exception as err:
                if not _unanswered(err):
                    self._answered(api)
                    raise
                with _lock:
                    _quiet_since.setdefault(api, sent)
                self._check(what, api, err)
                self.sleep(min(pause, self._left(api)))
                pause = min(2 * pause, 5.0)
                continue
            self._answered(api)
            return result

    def _left(self, api: str) -> float:
        since = _quiet_since.get(api)
        return self.seconds if since is None else max(0.0, self.seconds - (self.clock() - since))

    def _check(self, what: str, api: str, err: BaseException) -> None:
        if self._left(api) > 0:
            return
        why = _why(err)
        host = self.hosts.get(api, api)
        raise UnreachableError(f"cannot reach the Google Cloud {api} API at {host} for {self.seconds:g}s ({what}: "
                               f"{why})", HINT) from err

    def _answered(self, api: str) -> None:
        with _lock:
            _quiet_since.pop(api, None)


def _answer_within(fn: Callable[[], T], seconds: float) -> T:
    """`fn` in a daemon thread, waited for `seconds` (longer while an SDK client is still being built:
    importing one can take seconds on a busy machine, and that is no silence of the network)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as err:  # noqa: BLE001  handed to the caller's thread
            box["error"] = err

    thread = threading.Thread(target=target, name="google-api-call", daemon=True)
    thread.start()
    thread.join(seconds)
    while thread.is_alive() and building_clients():
        thread.join(seconds)
    if thread.is_alive():
        raise NoAnswer(f"no answer within {seconds:g}s")
    if "error" in box:
        raise box["error"]
    return box["result"]


def _unanswered(err: BaseException) -> bool:
    """The endpoint gave no answer at all: connection refused or reset, no DNS, a timeout."""
    chain: BaseException | None = err
    for _ in range(10):
        if chain is None:
            return False
        if isinstance(chain, NoAnswer) or is_connection_error(chain) or _is_transport_error(chain):
            return True
        chain = chain.__cause__ or chain.__context__
    return False


_GRPC_NO_ANSWER = ("failed to connect", "dns resolution failed", "errors resolving", "lookup failed",
                   "connection refused", "connections to all backends", "name resolution", "socket closed",
                   "deadline exceeded")


def _is_transport_error(err: BaseException) -> bool:
    """google.auth's TransportError and gRPC's UNAVAILABLE before any answer (a REST 503 is an answer: the same
    class, without these words), known by name: no SDK import."""
    names = {kind.__name__ for kind in type(err).__mro__}
    if "TransportError" in names:
        return True
    text = str(err).lower()
    return bool(names & {"ServiceUnavailable", "DeadlineExceeded"}) and any(m in text for m in _GRPC_NO_ANSWER)


def _why(err: BaseException) -> str:
    text = " ".join(str(part) for part in _causes(err))
    if isinstance(err, NoAnswer):
        return "timed out: no answer"
    if any(marker in text for marker in ("Failed to resolve", "Name or service not known", "NameResolutionError",
                                         "nodename nor servname", "Temporary failure in name resolution",
                                         "DNS resolution failed", "errors resolving", "Domain name not found")):
        return "its name does not resolve: no network or no DNS?"
    if "refused" in text.lower():
        return "connection refused"
    if "timed out" in text.lower() or "timeout" in text.lower():
        return "timed out: no answer"
    return "network error"


def _causes(err: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and len(found) < 10:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found
