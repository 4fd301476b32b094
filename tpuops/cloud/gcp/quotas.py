"""The project's TPU quota from the Cloud Quotas API (google.cloud.cloudquotas_v1, REST transport).

The TPU API's quota ids name generation, kind and scope, e.g. TPUV6EPreemptiblePerProjectPerZoneForTPUAPI;
docs/quota.md says where each part was read. An id this module does not recognise (reserved quota, a
generation's new spelling) is left out rather than guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tpuops import catalog
from tpuops.cloud.gcp.clients import LazyClient
from tpuops.cloud.gcp.waiting import Timing
from tpuops.cloud.quotas import ANY_LOCATION, QuotaLimit
from tpuops.errors import PermissionDenied

API = "cloudquotas"
TPU_SERVICE = "tpu.googleapis.com"
VIEWER_ROLE = "roles/cloudquotas.viewer"
PAGE_SIZE = 500
QUOTA_ID_RE = re.compile(
    r"^TPU(?P<version>V\d+[A-Z]?)s?(?P<preemptible>Preemptible)?(?P<litepod>Litepod)?(?P<pod>Pod)?"
    r"(?P<serving>Serving)?PerProjectPer(?P<scope>Zone|Region)ForTPUAPI$"
)
# Google's quota page: single v2-8 and v3-8 devices get 16 TensorCores on demand and 48 preemptible by default;
# every other TPU quota defaults to 0.
DEVICE_DEFAULTS = {"on-demand": 16, "spot": 48}


class CloudQuotasApi(LazyClient):
    """QuotaApi over one cloudquotas_v1.CloudQuotasClient."""

    source = "Cloud Quotas API"

    def __init__(self, make_client: Callable[[], Any], project: str, timing: Timing) -> None:
        super().__init__(make_client)
        self.project = project
        self.timing = timing

    def tpu_limits(self) -> list[QuotaLimit]:
        parent = f"projects/{self.project}/locations/global/services/{TPU_SERVICE}"
        request = {"parent": parent, "page_size": PAGE_SIZE}
        try:
            infos = self.timing.call(lambda: list(self.client.list_quota_infos(request=request)),
                                     f"list the TPU quota of project {self.project}", API)
        except PermissionDenied as err:
            raise PermissionDenied(err.message, f"grant yourself {VIEWER_ROLE} on project {self.project} "
                                   f"(gcloud projects add-iam-policy-binding {self.project} "
                                   f"--member=user:YOU --role={VIEWER_ROLE})") from None
        return [limit for info in infos for limit in limits_of(info)]


def limits_of(info: Any) -> list[QuotaLimit]:
    """One QuotaInfo -> a QuotaLimit per dimensions entry (none for an id that is not a TPU chip quota)."""
    parsed = parse_quota_id(info.quota_id)
    if parsed is None:
        return []
    generation, kind, scope, slices, serving = parsed
    known = catalog.load().generations.get(generation)
    unit = "cores" if known is not None and known.size_counts == "cores" else "chips"
    default = DEVICE_DEFAULTS[kind] if slices == "device" else 0
    found = []
    for entry in info.dimensions_infos:
        dimensions = dict(entry.dimensions)
        location = dimensions.get(scope) or ANY_LOCATION
        found.append(QuotaLimit(info.quota_id, generation, kind, scope, location, int(entry.details.value),
                                default, unit, slices, serving))
    return found


def parse_quota_id(quota_id: str) -> tuple[str, str, str, str, bool] | None:
    """(generation, kind, scope, slices, serving) of a TPU API quota id, None for any other id."""
    match = QUOTA_ID_RE.match(quota_id)
    if match is None:
        return None
    version = match["version"].lower()  # v2, v4, v5p, v6e
    generation = "v5litepod" if match["litepod"] else version
    kind = "spot" if match["preemptible"] else "on-demand"
    slices = ("pod" if match["pod"] else "device") if generation in ("v2", "v3") else "any"
    return generation, kind, match["scope"].lower(), slices, bool(match["serving"])
