"""Google exceptions -> tpuops errors, so nothing above cloud/gcp ever sees a Google type.

Only the retry decision and the user's next step matter here: 429/500/503/504/deadline are transient,
a zone without capacity is a CapacityError, everything else (400/403/404/409) is a CloudError that says
what is wrong.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tpuops.errors import CapacityError, CloudError, PermissionDenied, QuotaError, TpuopsError, TransientError

CAPACITY_MARKERS = ("no more capacity", "resource_pool_exhausted", "zone_resource_pool_exhausted", "stockout")
TRANSIENT_HTTP = frozenset({429, 500, 502, 503, 504})
# gRPC codes: DEADLINE_EXCEEDED 4, RESOURCE_EXHAUSTED 8, INTERNAL 13, UNAVAILABLE 14.
TRANSIENT_GRPC = frozenset({4, 8, 13, 14})
T = TypeVar("T")
API_NAMES = {"tpu": "tpu.googleapis.com", "compute": "compute.googleapis.com", "storage": "storage.googleapis.com",
             "cloudquotas": "cloudquotas.googleapis.com"}


NOT_ALLOWED_MARKER = "not allowed to use the machine type"
QUOTA_HINT = "request more in the console (IAM & Admin > Quotas) or use another region"
CAPACITY_HINT = "try another zone or --wait-for-capacity"
TRANSIENT_HINT = "the API is busy or unavailable; try again"
ALLOWLIST_HINT = ("Compute Engine TPU machine types are allowlisted per project: ask your Google account team, or use "
                  "tpu.api: tpu where the generation allows it")


def is_quota_message(message: str) -> bool:
    """A quota refusal: Compute Engine's QUOTA_EXCEEDED ("Quota 'X' exceeded. Limit: ..."), the TPU API's ("Quota
    limit 'X' has been exceeded"); not a rate limit (those are 429s, never asked here)."""
    lowered = message.lower()
    return "quota_exceeded" in lowered or ("quota" in lowered and "exceeded" in lowered)


def refusal(what: str, message: str) -> CloudError | None:
    """A quota or allowlist refusal as one line that says which; None for anything else."""
    if NOT_ALLOWED_MARKER in message.lower():
        return PermissionDenied(f"{what}: the project may not use this TPU machine type: {message}", ALLOWLIST_HINT)
    if is_quota_message(message):
        return QuotaError(f"{what}: quota exceeded: {message}", QUOTA_HINT)
    return None


def is_capacity_message(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in CAPACITY_MARKERS)


def known_failure(what: str, message: str, capacity: bool = False, transient: bool = False,
                  may_refuse: bool = True) -> CloudError | None:
    """A quota or allowlist refusal (unless `may_refuse` is off: a rate limit's text may speak of quota), no
    capacity (from the text, or `capacity`: the caller knows it from a code), or transient (`transient`: the caller
    knows it from a status); None for anything else."""
    refused = refusal(what, message) if may_refuse else None
    if refused is not None:
        return refused
    if capacity or is_capacity_message(message):
        return CapacityError(f"{what}: no capacity: {message}", CAPACITY_HINT)
    if transient:
        return TransientError(f"{what}: {message}", TRANSIENT_HINT)
    return None


def operation_failure(what: str, errors: Iterable[tuple[str, str]], http_status: int | None = None) -> CloudError:
    """A Compute Engine operation's errors (or a managed instance's last attempt's), as (code, message) pairs; the
    operation's HTTP status says whether it failed transiently."""
    message = "; ".join(f"{code}: {text}" for code, text in errors)
    return known_failure(what, message, transient=http_status in TRANSIENT_HTTP) or CloudError(f"{what}: {message}")


def translate(err: BaseException, what: str, api: str, from_operation: bool = False) -> TpuopsError:
    """Map one SDK exception raised while doing `what` (e.g. "create TPU x") to a tpuops error."""
    from google.api_core import exceptions as gexc

    if isinstance(err, TpuopsError):
        return err
    message = _message(err)
    if isinstance(err, gexc.GoogleAPICallError):
        code = err.code if isinstance(err.code, int) else None
        grpc_code = _grpc_code(err)
        transient = code in TRANSIENT_HTTP or grpc_code in TRANSIENT_GRPC or isinstance(err, gexc.DeadlineExceeded)
        known = known_failure(what, message, capacity=from_operation and grpc_code == 8, transient=transient,
                              may_refuse=code != 429)
        if known is not None:
            return known
        if isinstance(err, gexc.Forbidden):
            return _permission_error(what, api, message)
        if isinstance(err, gexc.Unauthenticated):
            return CloudError(f"{what}: not authenticated: {message}", "run `gcloud auth application-default login`")
        if isinstance(err, gexc.NotFound):
            return CloudError(f"{what}: not found: {message}", "check the project, zone and names in the spec")
        if isinstance(err, gexc.Conflict):
            return CloudError(f"{what}: conflict: {message}", "the name is taken or the resource is busy")
        return CloudError(f"{what}: {message}")
    if is_connection_error(err):
        return TransientError(f"{what}: cannot reach the {api} API: {message}", "check the network and endpoints")
    return CloudError(f"{what}: {type(err).__name__}: {message}")


def none_if_missing(call: Callable[[], T]) -> Callable[[], T | None]:
    """`call` with NotFound turned into None: for gets and deletes, where a missing resource is an answer."""

    def wrapped() -> T | None:
        from google.api_core import exceptions as gexc

        try:
            return call()
        except gexc.NotFound:
            return None

    return wrapped


@contextlib.contextmanager
def translated(what: str, api: str, from_operation: bool = False) -> Iterator[None]:
    try:
        yield
    except TpuopsError:
        raise
    except Exception as err:  # noqa: BLE001  every SDK failure becomes ours
        raise translate(err, what, api, from_operation) from err


def _permission_error(what: str, api: str, message: str) -> CloudError:
    lowered = message.lower()
    service = API_NAMES.get(api, api)
    if "has not been used" in lowered or "service_disabled" in lowered or "is disabled" in lowered:
        return CloudError(f"{what}: the {service} API is not enabled", f"run `gcloud services enable {service}`")
    return PermissionDenied(f"{what}: permission denied: {message}", "ask a project owner for the missing role")


def _grpc_code(err: BaseException) -> int | None:
    status = getattr(err, "grpc_status_code", None)
    if status is None:
        return None
    value = getattr(status, "value", status)
    return value[0] if isinstance(value, tuple) else int(value)


def _message(err: BaseException) -> str:
    message = getattr(err, "message", None) or str(err) or type(err).__name__
    # REST errors start with "POST https://...?...: "; the URL says nothing the user can act on.
    message = re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", str(message))
    return " ".join(message.split())


def is_connection_error(err: BaseException) -> bool:
    """The network failed under the request (also a response cut off mid-body, which GCS reads meet)."""
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    with contextlib.suppress(ImportError):
        import requests

        if isinstance(err, (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)):
            return True
    return False
