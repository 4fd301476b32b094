"""The Cloud Quotas API v1 (cloudquotas.googleapis.com) over REST: a project's QuotaInfos per service, answered
with google.cloud.cloudquotas_v1's own messages, paged as Google pages them.

Knobs: `model.grant(quota_id, {"europe-west4-a": 64})` sets a limit above the default in named locations;
`model.page_size` the most a page holds; faults through `fake.server.faults` (e.g. the 403 of a disabled API:
`fake.disable()`, or of a missing role: `fake.deny()`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.http import HttpError, JsonServer, Request, dispatch

QUOTA_INFOS = r"^/v1/projects/(?P<project>[^/]+)/locations/global/services/(?P<service>[^/]+)/quotaInfos$"
TPU_SERVICE = "tpu.googleapis.com"
SCOPE_OF = re.compile(r"PerProjectPer(?P<scope>Zone|Region)")


@dataclass
class FakeQuota:
    quota_id: str
    default: int  # the value wherever no location has its own
    values: dict[str, int] = field(default_factory=dict)  # zone or region -> the value there

    @property
    def dimension(self) -> str:
        match = SCOPE_OF.search(self.quota_id)
        return match["scope"].lower() if match else "region"


class QuotasModel:
    def __init__(self, project: str) -> None:
        self.project = project
        self.lock = threading.Lock()
        self.quotas: dict[str, dict[str, FakeQuota]] = {TPU_SERVICE: {}}  # service -> quota id -> quota
        self.page_size = 3  # small, so a listing takes several pages

    def grant(self, quota_id: str, values: dict[str, int], default: int = 0, service: str = TPU_SERVICE) -> None:
        with self.lock:
            quota = self.quotas.setdefault(service, {}).setdefault(quota_id, FakeQuota(quota_id, default))
            quota.default = default
            quota.values.update(values)

    def listing(self, service: str) -> list[FakeQuota]:
        with self.lock:
            return sorted(self.quotas.get(service, {}).values(), key=lambda quota: quota.quota_id)


class QuotasFake:
    def __init__(self, model: QuotasModel) -> None:
        self.model = model
        self.server = JsonServer(self.handle, "cloudquotas")
        self.routes = [("GET", QUOTA_INFOS, self.list_quota_infos)]

    @property
    def url(self) -> str:
        return self.server.url

    def handle(self, request: Request) -> tuple[int, Any]:
        return dispatch("cloudquotas v1", self.routes, request, lambda err: None)

    def disable(self, times: int = 1) -> None:
        """The next listing answers as Google does for a project that never enabled the API."""
        self.server.faults.http_error(
            "GET", r"/quotaInfos$", 403, times=times,
            message=f"Cloud Quotas API has not been used in project {self.model.project} before or it is disabled. "
                    "Enable it by visiting https://console.developers.google.com/apis/api/cloudquotas.googleapis.com"
                    f"/overview?project={self.model.project} then retry.")

    def deny(self, times: int = 1) -> None:
        """The next listing answers as Google does for a caller without cloudquotas.quotas.get."""
        self.server.faults.http_error(
            "GET", r"/quotaInfos$", 403, times=times,
            message=f"Permission 'cloudquotas.quotas.get' denied on resource 'projects/{self.model.project}"
                    f"/locations/global/services/{TPU_SERVICE}' (or it may not exist).")

    def list_quota_infos(self, request: Request, project: str, service: str) -> dict[str, Any]:
        from google.cloud import cloudquotas_v1

        if project != self.model.project:
            raise HttpError(403, f"Permission denied on resource project {project}.")
        quotas = self.model.listing(service)
        start = int(request.query.get("pageToken") or 0)
        size = min(int(request.query.get("pageSize") or self.model.page_size), self.model.page_size)
        end = start + size
        infos = [self.info_message(project, service, quota) for quota in quotas[start:end]]
        response = cloudquotas_v1.ListQuotaInfosResponse(quota_infos=infos,
                                                         next_page_token=str(end) if end < len(quotas) else "")
        return _dict(response)

    @staticmethod
    def info_message(project: str, service: str, quota: FakeQuota) -> Any:
        from google.cloud import cloudquotas_v1

        dimension = quota.dimension
        entries = [cloudquotas_v1.DimensionsInfo(
            dimensions={dimension: location}, details=cloudquotas_v1.QuotaDetails(value=value),
            applicable_locations=[location]) for location, value in sorted(quota.values.items())]
        entries.append(cloudquotas_v1.DimensionsInfo(dimensions={}, details=cloudquotas_v1.QuotaDetails(
            value=quota.default), applicable_locations=["global"]))
        return cloudquotas_v1.QuotaInfo(
            name=f"projects/{project}/locations/global/services/{service}/quotaInfos/{quota.quota_id}",
            quota_id=quota.quota_id, service=service, is_precise=True, dimensions=[dimension],
            container_type=cloudquotas_v1.QuotaInfo.ContainerType.PROJECT, dimensions_infos=entries,
        )


def _dict(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(type(message).pb(message))
