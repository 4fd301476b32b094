"""The simulator's TPU quota: a simulated grant, so `tpuops quota`, `plan --live` and `init --from-quota` can be
rehearsed without a Google account.

The grant is `quota.json` under the local root (TPUOPS_HOME/local), a list of limits:

    {"limits": [{"generation": "v4", "kind": "spot", "zone": "local", "limit": 64}, ...]}

(`region` instead of `zone` for a regional limit; `kind` is spot or on-demand). Without the file the simulator
grants DEFAULT_GRANT, which reads like a small TRC grant in the simulator's one zone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpuops import catalog
from tpuops.cloud.quotas import QuotaLimit
from tpuops.errors import CloudError

QUOTA_FILE = "quota.json"
DEFAULT_GRANT = (
    {"generation": "v2", "kind": "spot", "zone": "local", "limit": 64},
    {"generation": "v2", "kind": "on-demand", "zone": "local", "limit": 32},
    {"generation": "v4", "kind": "spot", "zone": "local", "limit": 64},
)


class LocalQuotas:
    source = "the local simulator's grant"

    def __init__(self, root: Path) -> None:
        self.path = root / QUOTA_FILE

    def tpu_limits(self) -> list[QuotaLimit]:
        try:
            entries = json.loads(self.path.read_text())["limits"]
        except FileNotFoundError:
            entries = DEFAULT_GRANT
        except (ValueError, KeyError, TypeError) as err:
            raise CloudError(f"the simulator's quota file {self.path} is unreadable: {err!r}",
                             'write {"limits": [{"generation": "v4", "kind": "spot", "zone": "local", '
                             '"limit": 64}]}, or delete it for the default grant') from None
        return [self._limit(index, entry) for index, entry in enumerate(entries)]

    def _limit(self, index: int, entry: Any) -> QuotaLimit:
        try:
            generation, kind, limit = str(entry["generation"]), str(entry["kind"]), int(entry["limit"])
            scope = "zone" if "zone" in entry else "region"
            location = str(entry[scope])
        except (KeyError, TypeError, ValueError) as err:
            raise CloudError(f"{self.path}: limit {index} lacks or garbles {err}",
                             "each limit needs generation, kind, zone (or region) and limit") from None
        if kind not in ("spot", "on-demand"):
            raise CloudError(f"{self.path}: limit {index}: kind must be spot or on-demand, got {kind!r}")
        known = catalog.load().generations.get(generation)
        unit = "cores" if known is not None and known.size_counts == "cores" else "chips"
        slices = "any" if generation not in ("v2", "v3") else str(entry.get("slices", "device"))
        return QuotaLimit(f"simulated-{generation}-{kind}-{location}", generation, kind,  # type: ignore[arg-type]
                          scope, location, limit, int(entry.get("default", 0)), unit, slices)  # type: ignore[arg-type]
