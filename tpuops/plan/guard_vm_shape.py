"""The guard VM's fixed shape, apart from the resource kind (which imports the planner) so that `plan` can say
what the guard will be without an import circle."""

from __future__ import annotations

ROLE_LABEL = "tpuops-role"
GUARD_ROLE = "guard"
GUARD_TAG = "tpuops-guard"  # a network tag: a firewall rule may name the guard as its source by it
IMAGE_PROJECT, IMAGE_FAMILY = "debian-cloud", "debian-12"  # ships python3; the startup script adds python3-venv
DISK_GB = 10  # the smallest standard boot disk; 30 GB of standard disk are free with the free e2-micro


def guard_vm_name(cluster: str) -> str:
    return f"{cluster}-guard"
