"""What `plan` says about the guard when the spec enables it: where it runs, what it costs a month, the roles it
and its creator need, and what it needs of the network. Pure, but for the `--live` firewall check."""

from __future__ import annotations

from dataclasses import dataclass

from tpuops import catalog
from tpuops.cloud.base import Cloud
from tpuops.plan.guard_reach import GuardSource, letting_in, missing_rule_command
from tpuops.plan.guard_vm_shape import DISK_GB, GUARD_TAG
from tpuops.spec import Spec, region_of

HOURS_PER_MONTH = 730
# What the guard's service account does: recovers the TPU, reads and writes its bundle, lease and ledger.
GUARD_ROLES = (
    "roles/tpu.admin (to delete and create the TPU again)",
    "roles/iam.serviceAccountUser on the TPU's service account (to create a TPU that runs as it)",
    "roles/storage.objectAdmin on the bucket (bundle, lease, ledger)",
)
# The same for a TPU made by Compute Engine (tpu.api: compute): an instance, or a slice's template, policy and group.
COMPUTE_GUARD_ROLES = (
    "roles/compute.instanceAdmin.v1 (to delete and create the TPU's VMs again: its instance, or its group, "
    "instance template and workload policy)",
    *GUARD_ROLES[1:],
)
# What whoever runs `guard up` needs besides.
CREATOR_ROLES = (
    "roles/compute.instanceAdmin.v1 (to create the VM)",
    "roles/iam.serviceAccountUser on the guard's service account (to start a VM that runs as it)",
)


@dataclass(frozen=True)
class GuardPlan:
    host: str  # "e2-micro VM tpuops-guard" or "a detached local process"
    zone: str | None
    service_account: str
    price_per_month: float
    price_note: str
    guard_roles: tuple[str, ...]
    creator_roles: tuple[str, ...]
    network: str


def guard_plan(spec: Spec) -> GuardPlan | None:
    """The guard `up --guard` / `guard up` would start for this spec; None when the spec does not enable it."""
    if not spec.guard.enabled:
        return None
    if spec.provider == "local":
        return GuardPlan("a detached local process", spec.zone, "-", 0.0, "local: free", (), (), "")
    guard = spec.guard
    zone = guard.zone or spec.zone
    monthly, note = monthly_price(guard.machine_type, region_of(zone) if zone else None)
    account = guard.service_account or "the project's Compute default service account"
    network = (f"its external IP to install tpuops' dependencies from PyPI (a subnet without external IPs needs "
               f"Cloud NAT); a firewall rule letting it reach the workers on tcp:{spec.ssh.port} (checked by "
               "`plan --live` and `guard up`)")
    compute = (spec.tpu.api or catalog.load().default_api(spec.tpu.type)) == "compute"  # plan.tpu_api_of, which
    roles = COMPUTE_GUARD_ROLES if compute else GUARD_ROLES                          # imports this module
    return GuardPlan(f"{guard.machine_type} VM", zone, account, monthly, note, roles, CREATOR_ROLES, network)


def monthly_price(machine_type: str, region: str | None) -> tuple[float, str]:
    cat = catalog.load()
    prices = cat.guard
    free_regions = ", ".join(prices.free_regions)
    if machine_type == prices.free_machine_type and region in prices.free_regions:
        return 0.0, (f"Always Free in {region}: one {machine_type} per billing account, with "
                     f"{prices.free_disk_gb} GB of standard disk and its external IP")
    hourly = cat.machine_prices.get(machine_type)
    if hourly is None:
        return 0.0, f"{machine_type} is not in the catalog: price unknown"
    machine = hourly * HOURS_PER_MONTH
    address = prices.external_ip_price_per_hour * HOURS_PER_MONTH
    disk = DISK_GB * prices.standard_disk_price_per_gb_month
    note = (f"list price as of {prices.as_of}: {machine_type} ${machine:.2f} + external IP ${address:.2f} + "
            f"{DISK_GB} GB disk ${disk:.2f}; {prices.free_machine_type} is Always Free in {free_regions}")
    return round(machine + address + disk, 2), note


def reach_warnings(cloud: Cloud, spec: Spec) -> list[str]:
    """`plan --live`: the firewall rule the guard would need and the network lacks."""
    if not spec.guard.enabled or cloud.firewalls is None:
        return []
    network, port = spec.tpu.network, spec.ssh.port
    source = GuardSource(GUARD_TAG, spec.guard.service_account, custom_subnetwork=spec.tpu.subnetwork is not None)
    if letting_in(cloud.firewalls.ingress_rules(network), source, port) is not None:
        return []
    return [f"guard: no firewall rule of network {network} lets the guard reach the workers on tcp:{port}; "
            f"`guard up` would refuse. Add one: {missing_rule_command(network, spec.name, GUARD_TAG, port)}"]
