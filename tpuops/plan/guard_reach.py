"""Whether the guard VM will be able to reach the workers' SSH port, judged from the network's firewall rules
before anything is created: a guard that cannot reach its workers would only look alive.

The guard reaches the workers inside the VPC. A rule lets it in when it is an enabled ingress allow rule of the
network, allows TCP on the port, applies to every instance (no target tags or target service accounts: tpuops
gives TPU VMs neither) and names the guard as a source: by its network tag, by its service account, or by an
address range that holds every address the guard may get. Deny rules are not weighed: a deny rule of higher
priority can still block what is allowed here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from tpuops.cloud.base import FirewallRule

# Where an auto-mode network (the `default` one) puts every region's subnet; a custom subnet may be elsewhere,
# so for a named subnetwork only a range of all IPv4 addresses is taken on trust.
AUTO_MODE_RANGE = ipaddress.ip_network("10.128.0.0/9")
EVERYWHERE = ipaddress.ip_network("0.0.0.0/0")


@dataclass(frozen=True)
class GuardSource:
    """How a firewall rule may name the guard."""

    tag: str
    service_account: str | None  # None: the project's Compute default account (unknown without a call)
    custom_subnetwork: bool = False


def allows_port(rule: FirewallRule, port: int) -> bool:
    for protocol, ports in rule.allowed:
        if protocol not in ("tcp", "all", "6"):
            continue
        if not ports or any(_in_range(port, spec) for spec in ports):
            return True
    return False


def _in_range(port: int, spec: str) -> bool:
    low, _, high = spec.partition("-")
    try:
        return int(low) <= port <= int(high or low)
    except ValueError:
        return False


def names_the_guard(rule: FirewallRule, source: GuardSource) -> bool:
    if source.tag in rule.source_tags:
        return True
    if source.service_account and source.service_account in rule.source_service_accounts:
        return True
    covering = EVERYWHERE if source.custom_subnetwork else AUTO_MODE_RANGE
    for text in rule.source_ranges:
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            continue
        if network.version == 4 and covering.subnet_of(network):  # type: ignore[arg-type]
            return True
    return False


def applies_to_every_instance(rule: FirewallRule) -> bool:
    return not rule.target_tags and not rule.target_service_accounts


def letting_in(rules: Sequence[FirewallRule], source: GuardSource, port: int) -> FirewallRule | None:
    """The first rule that lets the guard reach `port` on every worker, None when there is none."""
    for rule in rules:
        if not rule.disabled and allows_port(rule, port) and applies_to_every_instance(rule) \
                and names_the_guard(rule, source):
            return rule
    return None


def missing_rule_command(network: str, cluster: str, tag: str, port: int) -> str:
    """The gcloud command that adds the rule the guard needs, as the hint names it."""
    return (f"gcloud compute firewall-rules create {cluster}-guard-ssh --network={network} --direction=INGRESS "
            f"--allow=tcp:{port} --source-tags={tag}")
