"""A VPC network's firewall rules through google.cloud.compute_v1's FirewallsClient (REST): read only, so that
the guard's reach to the workers' SSH port is checked before anything is created."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tpuops.cloud.base import FirewallRule
from tpuops.cloud.gcp.waiting import Timing

API = "compute"


class FirewallsApi:
    """FirewallApi over compute_v1's FirewallsClient."""

    def __init__(self, make_client: Callable[[], Any], project: str, timing: Timing) -> None:
        self._make_client = make_client
        self.project = project
        self.timing = timing

    @functools.cached_property
    def client(self) -> Any:
        return self._make_client()

    def ingress_rules(self, network: str) -> list[FirewallRule]:
        # Filtered here, not by the API: a network's URL in a filter differs between API versions and endpoints.
        found = self.timing.call(lambda: list(self.client.list(project=self.project)), "list firewall rules", API)
        rules = [to_rule(firewall) for firewall in found if firewall.direction in ("", "INGRESS")]
        return [rule for rule in rules if rule.network == network and rule.allowed]


def to_rule(firewall: Any) -> FirewallRule:
    return FirewallRule(
        name=firewall.name,
        network=firewall.network.rsplit("/", 1)[-1],
        allowed=tuple((allowed.I_p_protocol, tuple(allowed.ports)) for allowed in firewall.allowed),
        source_ranges=tuple(firewall.source_ranges),
        source_tags=tuple(firewall.source_tags),
        source_service_accounts=tuple(firewall.source_service_accounts),
        target_tags=tuple(firewall.target_tags),
        target_service_accounts=tuple(firewall.target_service_accounts),
        disabled=bool(firewall.disabled),
    )
