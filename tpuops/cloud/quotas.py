"""The project's TPU quota, provider-neutral: what limits are in effect where (not how much of them is used:
usage is what the project's TPUs and queued resources hold, listed through the TPU API, see ops/quota.py).

Google's Cloud Quotas API answers on Google Cloud (cloud/gcp/quotas.py); the local simulator answers from a
simulated grant (cloud/local/quotas.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

QuotaKind = Literal["spot", "on-demand"]  # "spot" is Google's preemptible quota: spot and preemptible TPUs draw on it
QuotaScope = Literal["zone", "region"]
QuotaSlices = Literal["any", "device", "pod"]  # v2 and v3 count single devices (-8) and pod slices apart
QuotaUnit = Literal["chips", "cores"]
ANY_LOCATION = "*"  # a limit that holds wherever no limit names the zone or region itself
PREEMPTIBLE_PROVISIONING = frozenset({"spot", "preemptible"})  # the models Google's preemptible quota serves


def quota_kind(provisioning: str) -> QuotaKind:
    """The quota a TPU draws on by how it is provisioned (a pool's spot, preemptible or on-demand): spot and
    preemptible share Google's preemptible quota ("spot"); an on-demand TPU draws on the on-demand quota."""
    return "spot" if provisioning in PREEMPTIBLE_PROVISIONING else "on-demand"


def quota_kind_of(spot: bool, preemptible: bool = False) -> QuotaKind:
    """The quota a TPU seen in the cloud draws on, by its scheduling flags."""
    return quota_kind("spot" if spot else "preemptible" if preemptible else "on-demand")


def provisioning_for(kind: QuotaKind) -> str:
    """The provisioning of a pool that draws on quota `kind` (`init --from-quota`): spot for the preemptible quota,
    the newer of the two models it serves."""
    return "spot" if kind == "spot" else "on-demand"


@dataclass(frozen=True)
class QuotaLimit:
    """One limit in effect: `limit` units of `generation` TPUs of `kind`, in one zone or region."""

    quota_id: str  # Google's id (TPUV6EPreemptiblePerProjectPerZoneForTPUAPI), or the simulator's
    generation: str  # the catalog's generation name: v2, v3, v4, v5litepod, v5p, v6e
    kind: QuotaKind
    scope: QuotaScope
    location: str  # the zone or region; ANY_LOCATION: every one not named by a limit of its own
    limit: int  # -1: unlimited
    default: int  # Google's default for this quota (documented, not in the API's answer)
    unit: QuotaUnit  # what a TPU draws: the number in its type (v4-32: 32 TensorCores; v6e-8: 8 chips)
    slices: QuotaSlices = "any"
    serving: bool = False  # v5e's serving quota (small v5litepod types)

    @property
    def granted(self) -> bool:
        """Above Google's default: what a TRC grant or an approved increase looks like."""
        return self.limit < 0 or self.limit > self.default


class QuotaApi(Protocol):
    source: str  # where the limits come from, for the user: "Cloud Quotas API", "the local simulator's grant"

    def tpu_limits(self) -> list[QuotaLimit]:
        """Every TPU quota limit of the project (zone and region limits, both kinds), in no particular order.

        Raises CloudError naming how to enable the API, PermissionDenied naming the role."""
        ...
