"""The errors tpuops reports to users.

Every failure a user can act on is a `TpuopsError` carrying one line of message and an optional hint;
the CLI prints them as a single line and exits with `exit_code`. Adapters translate the Google SDKs'
exceptions into these classes, so that nothing above `cloud/gcp` ever sees a Google type.
"""

from __future__ import annotations


class TpuopsError(Exception):
    """A problem the user can fix; rendered as one line plus a hint."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(TpuopsError):
    """Wrong command-line usage."""

    exit_code = 2


class SpecError(TpuopsError):
    """A spec that does not validate; names file, line and field where they are known."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        where = ":".join(str(part) for part in (path, line) if part is not None)
        prefix = ": ".join(part for part in (where, field) if part)
        super().__init__(f"{prefix}: {message}" if prefix else message, hint)
        self.path = path
        self.line = line
        self.field = field


class ClusterNotFound(TpuopsError):
    """No local state for a cluster name."""


class CredentialsError(TpuopsError):
    """No usable Google credentials."""


class CloudError(TpuopsError):
    """A cloud API call failed for a reason retrying will not fix (400, 403, 404, 409, ...)."""


class PermissionDenied(CloudError):
    """HTTP 403 for want of a role (not a disabled API): the caller names the role to grant."""


class UnreachableError(CloudError):
    """A Google endpoint gave no answer at all for the whole deadline (offline, wrong endpoint, blackhole)."""


class TransientError(CloudError):
    """A cloud call failed in a way worth retrying (429, 500, 503, deadline exceeded)."""


class CapacityError(CloudError):
    """The zone has no capacity for the TPU right now (RESOURCE_EXHAUSTED, 'no more capacity')."""


class QuotaError(CloudError):
    """The project's quota does not allow it (Compute Engine QUOTA_EXCEEDED): waiting or retrying will not help."""


class ForeignResourceError(CloudError):
    """A resource with our name exists but does not carry our cluster label: never touched."""


class RemoteError(TpuopsError):
    """A worker could not be reached or refused us (SSH)."""


class HostKeyError(RemoteError):
    """A worker's host key changed or could not be verified."""
