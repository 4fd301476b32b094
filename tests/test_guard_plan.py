"""`tpuops plan` with the guard enabled: where it runs, its price per month (Always Free or list price), the roles
it and `guard up` need, and what it needs of the network. The CLI as a subprocess, offline."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_cli, write_spec


def spec(tmp_path: Path, zone: str, guard: str = "{enabled: true}") -> Path:
    return write_spec(tmp_path, f"""
        name: night
        zone: {zone}
        tpu: {{type: v2-8}}
        bucket: {{name: night-bucket-x}}
        guard: {guard}
        """)


def test_plan_shows_a_free_guard_in_an_always_free_region(tmp_path: Path) -> None:
    result = run_cli("plan", str(spec(tmp_path, "us-central1-f")))
    assert result.returncode == 0, result.stderr
    assert "Guard: e2-micro VM in us-central1-f, $0.00/month (Always Free in us-central1" in result.stdout
    assert "roles/tpu.admin" in result.stdout and "roles/compute.instanceAdmin.v1" in result.stdout
    assert "roles/iam.serviceAccountUser" in result.stdout
    assert "roles/storage.objectAdmin on the bucket" in result.stdout
    assert "PyPI" in result.stdout and "Cloud NAT" in result.stdout and "tcp:22" in result.stdout


def test_plan_prices_a_guard_elsewhere_at_list_price_with_its_address_and_disk(tmp_path: Path) -> None:
    guard = "{enabled: true, zone: europe-west4-b, service_account: g@p.iam.gserviceaccount.com}"
    path = spec(tmp_path, "europe-west4-a", guard)
    result = run_cli("plan", str(path), "--json")
    assert result.returncode == 0, result.stderr
    guard = json.loads(result.stdout)["guard"]
    assert guard["zone"] == "europe-west4-b" and guard["service_account"] == "g@p.iam.gserviceaccount.com"
    # e2-micro $0.0084/h, an external IPv4 address $0.005/h, 10 GB of standard disk at $0.04/GB-month
    assert guard["price_per_month"] == round(0.0084 * 730 + 0.005 * 730 + 10 * 0.04, 2)
    assert "list price as of 2025-06-01" in guard["price_note"]
    assert "Always Free in us-west1, us-central1, us-east1" in guard["price_note"]


def test_plan_says_nothing_of_a_guard_the_spec_does_not_enable(tmp_path: Path) -> None:
    result = run_cli("plan", str(spec(tmp_path, "us-central1-f", "{enabled: false}")), "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["guard"] is None
    assert "Guard:" not in run_cli("plan", str(spec(tmp_path, "us-central1-f", "{enabled: false}"))).stdout
