"""Queued resources never outlive the wait they were made for.

A queued resource nobody waits for any more may still be granted hours later and bill a TPU nobody uses.
`create_queued_within` asks the provider to drop the request itself when the wait ends (valid_until), and
withdraws it (delete, force) when the wait ends any other way: timed out, FAILED, an error, Ctrl-C. When even
that fails, `QueuedLeftBehind` says exactly what is still queued and how to remove it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone

from tpuops.cloud.base import QueuedResource, QueuedResourceApi, TpuRequest, has_labels
from tpuops.errors import CloudError, TpuopsError

WAITING_STATES = frozenset({"CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING"})


class QueuedLeftBehind(CloudError):
    """A queued resource tpuops gave up on could not be deleted: it may still be granted."""


def create_queued_within(api: QueuedResourceApi, name: str, request: TpuRequest, wait_seconds: float,
                         cluster: str) -> QueuedResource:
    """Queue `request` as `name`, valid for `wait_seconds`, and wait for it to be ACTIVE.

    However the wait ends without ACTIVE (in this thread), the queued resource is withdrawn before the error
    goes on; if withdrawing fails, QueuedLeftBehind replaces the error."""
    try:
        return api.create_queued(name, request, wait_seconds, valid_until=wait_seconds)
    except BaseException as err:
        withdraw_queued(api, request.zone, name, cluster=cluster, owned_if=request.labels, because=err)
        raise


def withdraw_queued(api: QueuedResourceApi, zone: str, name: str, *, cluster: str,
                    owned_if: Mapping[str, str] | None = None, because: BaseException | None = None,
                    only_waiting: bool = False) -> bool:
    """Delete queued resource `name` (force: a node it created goes too). True when one was deleted; False when
    there was none, or (with `owned_if`) it does not carry those labels: another's request is never touched;
    or (`only_waiting`) it no longer waits: a granted TPU stays.

    Raises QueuedLeftBehind (from `because`, the reason for giving up, when given) when the delete fails or is
    interrupted."""
    try:
        found = api.get_queued(zone, name)
        if found is None or (owned_if is not None and not has_labels(found.labels, owned_if)):
            return False
        if only_waiting and found.state not in WAITING_STATES:
            return False
        api.delete_queued(zone, name)
        return True
    except (TpuopsError, KeyboardInterrupt) as err:
        why = err.message if isinstance(err, TpuopsError) else "interrupted"
        raise QueuedLeftBehind(
            f"queued resource {name} in {zone} is still queued and may be granted later (deleting it failed: {why})",
            f"`tpuops down {cluster}` removes it, as does "
            f"`gcloud compute tpus queued-resources delete {name} --zone {zone} --force`",
        ) from (because or err)


def waiting_age(queued: QueuedResource, now: datetime | None = None) -> float | None:
    """Seconds a queued resource has been waiting (None when it is not waiting or its creation time is unknown)."""
    if queued.state not in WAITING_STATES or queued.created_at is None:
        return None
    created = queued.created_at if queued.created_at.tzinfo else queued.created_at.replace(tzinfo=timezone.utc)
    return max(0.0, ((now or datetime.now(timezone.utc)) - created).total_seconds())
