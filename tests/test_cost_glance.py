"""Cost at a glance: the cluster list's $/hour, time held, cost so far and autostop, and what `down` says the
cluster cost in all; with a fixed clock the numbers add up (cost = hours held x $/hour, the catalog's list price,
the spot price where the spec asks for spot or preemptible)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tpuops import catalog
from tpuops.cli.cluster import cost_cells, cost_in_all
from tpuops.context import Context
from tpuops.ops import down as ops_down
from tpuops.ops.status import list_clusters
from tpuops.state import epoch_seconds

CREATED = "2026-03-01T08:00:00+00:00"
SPEC = """
name: {name}
zone: europe-west4-a
tpu:
  type: {type}
  spot: {spot}
code:
  path: ./src
"""


def held_cluster(home: Path, tmp_path: Path, name: str, tpu_type: str, spot: bool, autostop: str | None = None,
                 ) -> None:
    """What `up` leaves for a TPU it saw ready at CREATED (no cloud is asked by the list)."""
    spec = write_spec(tmp_path, SPEC.format(name=name, type=tpu_type, spot=str(spot).lower()), f"{name}.yaml")
    state = {
        "name": name, "provider": "gcp", "project": "test-project", "zone": "europe-west4-a", "spec_path": str(spec),
        "resources": [{"kind": "tpu", "name": name, "zone": "europe-west4-a", "status": "created",
                       "created_at": CREATED}],
    }
    if autostop:
        state["autostop"] = {"idle": autostop}
    directory = home / "clusters" / name
    directory.mkdir(parents=True)
    (directory / "state.json").write_text(json.dumps(state))


def test_the_list_adds_up_with_a_fixed_clock(tpuops_home: Path, tmp_path: Path) -> None:
    held_cluster(tpuops_home, tmp_path, "ondemand", "v4-8", spot=False, autostop="30m")
    held_cluster(tpuops_home, tmp_path, "cheap", "v3-8", spot=True)
    now = epoch_seconds(CREATED) + 2.5 * 3600  # held two and a half hours
    by_name = {c.name: c for c in list_clusters(Context.from_env(), now=now)}

    v4 = catalog.load().accelerator("v4-8").price_per_hour(spot=False)
    v3_spot = catalog.load().accelerator("v3-8").price_per_hour(spot=True)
    assert v4 == pytest.approx(4 * 3.22) and v3_spot == pytest.approx(4 * 0.60)  # the catalog's list prices
    ondemand, cheap = by_name["ondemand"], by_name["cheap"]
    assert ondemand.cost.per_hour == pytest.approx(v4) and cheap.cost.per_hour == pytest.approx(v3_spot)
    assert ondemand.cost.uptime_seconds == cheap.cost.uptime_seconds == 9000
    assert ondemand.cost.dollars == pytest.approx(2.5 * v4) and cheap.cost.dollars == pytest.approx(2.5 * v3_spot)
    assert (ondemand.autostop, cheap.autostop) == ("idle 30m", "off")
    assert cost_cells(ondemand.cost) == ("$12.88", "2h30m", "$32.20")  # 2.5 h x $12.88/h
    assert cost_cells(cheap.cost) == ("$2.40", "2h30m", "$6.00")
    assert cost_in_all(ondemand.cost).startswith("TPU held 2h30m (2.50 h) x $12.88/h: about $32.20 in all")


def test_the_list_on_the_command_line(tpuops_home: Path, tmp_path: Path) -> None:
    held_cluster(tpuops_home, tmp_path, "ondemand", "v4-8", spot=False, autostop="30m")
    spec = write_spec(tmp_path, """
        name: sim
        provider: local
        tpu: {type: v2-8, workers: 1}
        code: {path: ./src}
    """)
    (tmp_path / "src").mkdir()
    assert run_cli("up", str(spec)).returncode == 0
    try:
        shown = run_cli("status")
        assert shown.returncode == 0, shown.stderr
        header, *lines = shown.stdout.splitlines()
        assert header.split()[:9] == ["NAME", "PROVIDER", "ZONE", "WORKERS", "$/HOUR", "HELD", "COST", "AUTOSTOP",
                                      "RESOURCES"]
        ondemand = next(line for line in lines if line.startswith("ondemand")).split()
        assert ondemand[4] == "$12.88" and ondemand[7:9] == ["idle", "30m"]
        sim = next(line for line in lines if line.startswith("sim")).split()
        assert sim[4] == "free" and sim[6] == "free"
        listed = {c["name"]: c for c in json.loads(run_cli("status", "--json").stdout)}
        cost = listed["ondemand"]["cost"]
        assert cost["dollars"] == pytest.approx(cost["per_hour"] * cost["uptime_seconds"] / 3600, abs=0.01)
        gone = run_cli("down", "sim", "--yes")
        assert gone.returncode == 0 and "TPU held" in gone.stdout and "local simulator: free" in gone.stdout
    finally:
        run_cli("down", "sim", "--yes")


def test_down_says_what_the_cluster_cost_in_all(tpuops_home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: sim
        provider: local
        tpu: {type: v2-8, workers: 1}
        code: {path: ./src}
    """)
    (tmp_path / "src").mkdir()
    assert run_cli("up", str(spec)).returncode == 0
    ctx = Context.from_env()
    created = epoch_seconds(ctx.store.require("sim").tpu_record().created_at)
    plan, cloud = ops_down.find(ctx, "sim")
    result = ops_down.execute(ctx, plan, cloud, now=created + 5400)
    assert result.cost is not None and result.cost.uptime_seconds == 5400 and result.cost.dollars == 0.0
    assert cost_in_all(result.cost) == "TPU held 1h30m (1.50 h), local simulator: free"


def test_a_type_with_no_list_price_is_said_unknown_not_free_nor_zero_dollars() -> None:
    """TPU7x has no public list price: the list says `?` (not `free`, not $0.00), `down` and the guard say why."""
    from tpuops.autostop.client import cost_so_far

    created = epoch_seconds(CREATED)
    cost = cost_so_far(list_prices=True, accelerator_type="tpu7x-32", spot=True, created_at=created,
                       now=created + 7200)
    assert not cost.priced and "no list price known" in cost.note and "$" not in cost.note
    assert cost_cells(cost) == ("?", "2h", "?")
    assert "$" not in cost_in_all(cost) and "no list price known" in cost_in_all(cost)
    assert "$" not in cost.line() and cost.as_dict()["dollars"] is None
    priced = cost_so_far(list_prices=True, accelerator_type="v5litepod-8", spot=False, created_at=created,
                         now=created + 7200)
    assert priced.priced and cost_cells(priced)[2] == f"${priced.per_hour * 2:.2f}"
