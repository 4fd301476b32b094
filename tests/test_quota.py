"""`tpuops quota`, `init --from-quota` and pools in the spec: the Cloud Quotas API and the TPU API faked at the
wire (the real google-cloud-quotas and google-cloud-tpu clients over REST), and the local simulator's grant."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import pytest

from tests.fakes.compute import ComputeFake, ComputeModel
from tests.fakes.compute_tpus import TpuComputeModel, TpuComputeRoutes
from tests.fakes.quotas_http import QuotasFake, QuotasModel
from tests.fakes.tpu_model import FakeNode, FakeQueued, TpuModel
from tests.fakes.tpu_v2_http import TpuV2Fake
from tests.helpers import run_cli, write_spec
from tpuops import catalog
from tpuops.cloud.base import TpuRequest
from tpuops.cloud.compute_tpu import TpuVmRequest
from tpuops.cloud.gcp import make_cloud
from tpuops.cloud.gcp.quotas import parse_quota_id
from tpuops.cloud.quotas import QuotaKind, provisioning_for, quota_kind, quota_kind_of
from tpuops.errors import SpecError
from tpuops.spec import load_spec
from tpuops.spec.pools import Provisioning

PROJECT = "trc-project"
ZONE = "europe-west4-a"
SPOT_ZONE = "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI"
SPOT_REGION = "TPUV6EPreemptiblePerProjectPerRegionForTPUAPI"


@dataclass
class Fakes:
    tpu: TpuModel
    tpu_api: TpuV2Fake
    quotas: QuotasModel
    quotas_api: QuotasFake
    compute: ComputeModel  # TPUs made as Compute Engine VMs hold quota too
    compute_tpus: TpuComputeModel
    compute_api: ComputeFake

    def env(self, home: Path) -> dict[str, str]:
        return {"CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": self.tpu_api.server.url + "/",
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDQUOTAS": self.quotas_api.url + "/",
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": self.compute_api.server.url + "/compute/v1/",
                "GOOGLE_CLOUD_PROJECT": PROJECT, "TPUOPS_HOME": str(home), "TPUOPS_RETRY_INITIAL": "0.01",
                "TPUOPS_POLL_INTERVAL": "0.02"}


@pytest.fixture(scope="module")
def servers() -> Iterator[Fakes]:
    tpu = TpuModel(PROJECT)
    tpu_api = TpuV2Fake(tpu)
    tpu_api.server.start()
    try:
        quotas = QuotasModel(PROJECT)
        quotas_api = QuotasFake(quotas)
        quotas_api.server.start()
        try:
            compute = ComputeModel(PROJECT)
            compute_api = ComputeFake(compute)
            compute_tpus = TpuComputeModel(compute)
            TpuComputeRoutes(compute_api, compute_tpus)
            compute_api.server.start()
            try:
                yield Fakes(tpu, tpu_api, quotas, quotas_api, compute, compute_tpus, compute_api)
            finally:
                compute_api.server.stop()
        finally:
            quotas_api.server.stop()
    finally:
        tpu_api.server.stop()


@pytest.fixture
def fakes(servers: Fakes) -> Iterator[Fakes]:
    """The module's servers, empty for each test."""
    servers.tpu.nodes.clear()
    servers.tpu.queued.clear()
    servers.quotas.quotas = {"tpu.googleapis.com": {}}
    for made in (servers.compute.instances, servers.compute_tpus.groups, servers.compute_tpus.templates,
                 servers.compute_tpus.policies):
        made.clear()
    for server in (servers.tpu_api.server, servers.quotas_api.server, servers.compute_api.server):
        server.faults.rules.clear()
        server.requests.clear()
    yield servers


def a_trc_grant(fakes: Fakes) -> None:
    """v6e spot in europe-west4-a (and its region), v5e spot in us-central1-a, as a TRC grant reads; the rest at
    Google's defaults, with ids tpuops must ignore among them."""
    fakes.quotas.grant(SPOT_ZONE, {ZONE: 64})
    fakes.quotas.grant(SPOT_REGION, {"europe-west4": 128})
    fakes.quotas.grant("TPUV6EPerProjectPerZoneForTPUAPI", {})
    fakes.quotas.grant("TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", {"us-central1-a": 64})
    fakes.quotas.grant("TPUV5sLitepodServingPerProjectPerZoneForTPUAPI", {}, default=4)
    fakes.quotas.grant("QueuedResourcesPerProjectPerZone", {}, default=100)


def hold_some(fakes: Fakes) -> None:
    """A spot v6e-8 TPU and a spot v6e-16 queued resource still waiting in ZONE; an on-demand TPU (other quota)."""
    def node(name: str, kind: str, spot: bool, state: str = "READY") -> FakeNode:
        return FakeNode(name, ZONE, kind, "v2-alpha-tpuv6e", "vm", state=state, spot=spot)

    fakes.tpu.nodes[(ZONE, "held")] = node("held", "v6e-8", True)
    fakes.tpu.nodes[(ZONE, "paid")] = node("paid", "v6e-4", False)
    fakes.tpu.queued[(ZONE, "waiting")] = FakeQueued("waiting", ZONE, node("waiting", "v6e-16", True, "CREATING"),
                                                     state="WAITING_FOR_RESOURCES", spot=True)


# ------------------------------------------------------------------------------------------ quota ids


@pytest.mark.parametrize(("quota_id", "parsed"), [
    (SPOT_ZONE, ("v6e", "spot", "zone", "any", False)),
    ("TPUV6EPerProjectPerRegionForTPUAPI", ("v6e", "on-demand", "region", "any", False)),
    ("TPUV5PPerProjectPerZoneForTPUAPI", ("v5p", "on-demand", "zone", "any", False)),
    ("TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", ("v5litepod", "spot", "zone", "any", False)),
    ("TPUV5sPreemptibleLitepodServingPerProjectPerZoneForTPUAPI", ("v5litepod", "spot", "zone", "any", True)),
    ("TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI", ("v4", "spot", "region", "any", False)),
    ("TPUV2sPodPerProjectPerZoneForTPUAPI", ("v2", "on-demand", "zone", "pod", False)),
    ("TPUV2sPreemptiblePodPerProjectPerRegionForTPUAPI", ("v2", "spot", "region", "pod", False)),
    ("QueuedResourcesPerProjectPerZone", None),
])
def test_quota_ids_name_generation_kind_and_scope(quota_id: str, parsed: tuple | None) -> None:
    assert parse_quota_id(quota_id) == parsed


# ------------------------------------------------------------------------------------------ tpuops quota


def test_quota_shows_the_grant_what_is_held_and_what_is_free(fakes: Fakes, tmp_path: Path) -> None:
    a_trc_grant(fakes)
    hold_some(fakes)
    result = run_cli("quota", "--json", env=fakes.env(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = {(row["quota_id"], row["location"]): row for row in json.loads(result.stdout)["quota"]}
    zone = rows[(SPOT_ZONE, ZONE)]
    assert (zone["limit"], zone["default"], zone["granted"], zone["used"], zone["free"]) == (64, 0, True, 24, 40)
    assert (rows[(SPOT_REGION, "europe-west4")]["used"], rows[(SPOT_REGION, "europe-west4")]["free"]) == (24, 104)
    v5e = rows[("TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", "us-central1-a")]
    assert (v5e["generation"], v5e["kind"], v5e["unit"], v5e["free"]) == ("v5litepod", "spot", "chips", 64)
    serving = rows[("TPUV5sLitepodServingPerProjectPerZoneForTPUAPI", "*")]
    assert (serving["limit"], serving["used"], serving["granted"]) == (4, None, True)
    assert not [key for key in rows if key[0].startswith(("QueuedResources", "TPUV6EPerProject"))]
    # six quota ids at three a page: the client followed the pages
    assert len(fakes.quotas_api.server.calls("GET", r"/quotaInfos$")) == 2


def test_compute_engine_tpus_count_as_use_of_the_grant(fakes: Fakes, tmp_path: Path) -> None:
    """A v6e-16 on-demand slice (a group of 4 VMs) and a v6e-8 Spot VM made through Compute Engine hold 16 of the
    on-demand quota and 8 of the spot grant; a reservation-bound VM draws on its reservation, not on them."""
    a_trc_grant(fakes)
    fakes.quotas.grant("TPUV6EPerProjectPerZoneForTPUAPI", {ZONE: 32})
    compute_tpus = make_cloud(fakes.env(tmp_path), PROJECT).compute_tpus
    assert compute_tpus is not None
    for name, accelerator, provisioning in (("slice", "v6e-16", "standard"), ("single", "v6e-8", "spot"),
                                            ("booked", "v6e-4", "reservation-bound")):
        shape = catalog.load().compute_shape(accelerator)
        assert shape is not None
        compute_tpus.create_tpu_vm(TpuVmRequest(
            name=name, zone=ZONE, accelerator_type=accelerator, machine_type=shape.machine_type, hosts=shape.hosts,
            image_project=shape.image_project, image_family=shape.image_family, boot_disk_type=shape.boot_disk_type,
            boot_disk_gb=shape.boot_disk_gb, topology=shape.topology, provisioning=provisioning,  # type: ignore[arg-type]
            reservation="block-a" if provisioning == "reservation-bound" else None, labels={"tpuops-cluster": name}))
    result = run_cli("quota", "--json", env=fakes.env(tmp_path))
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    rows = {(row["quota_id"], row["location"]): row for row in shown["quota"]}
    assert (rows[(SPOT_ZONE, ZONE)]["used"], rows[(SPOT_ZONE, ZONE)]["free"]) == (8, 56)
    assert rows[(SPOT_REGION, "europe-west4")]["used"] == 8
    assert (rows[("TPUV6EPerProjectPerZoneForTPUAPI", ZONE)]["used"],
            rows[("TPUV6EPerProjectPerZoneForTPUAPI", ZONE)]["free"]) == (16, 16)
    assert sorted((held["name"], held["kind"], held["size"]) for held in shown["held_by"]) == [
        ("single", "spot", 8), ("slice", "on-demand", 16)]


def test_quota_for_one_zone_in_words(fakes: Fakes, tmp_path: Path) -> None:
    a_trc_grant(fakes)
    hold_some(fakes)
    result = run_cli("quota", "--zone", ZONE, env=fakes.env(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split()[:7] == [ZONE, "v6e", "spot", "64", "0", "24", "40"] and line.endswith("granted")
               for line in lines), result.stdout
    assert "us-central1-a" not in result.stdout


@pytest.mark.parametrize(("fault", "expected"), [
    ("disable", "the cloudquotas.googleapis.com API is not enabled (hint: run `gcloud services enable "
                "cloudquotas.googleapis.com`)"),
    ("deny", "roles/cloudquotas.viewer"),
])
def test_quota_api_disabled_or_denied_is_one_line(fakes: Fakes, tmp_path: Path, fault: str, expected: str) -> None:
    getattr(fakes.quotas_api, fault)()
    result = run_cli("quota", env=fakes.env(tmp_path))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------------------------------------ init and plan


def test_init_from_quota_writes_the_granted_pools_and_plan_covers_them(fakes: Fakes, tmp_path: Path) -> None:
    a_trc_grant(fakes)
    hold_some(fakes)
    spec_path = tmp_path / "grant.yaml"
    written = run_cli("init", "--from-quota", str(spec_path), env=fakes.env(tmp_path))
    assert written.returncode == 0, written.stderr
    pools = load_spec(spec_path).pools()
    assert [(p.type, p.zone, p.provisioning) for p in pools] == [
        ("v6e-64", ZONE, "spot"), ("v5litepod-64", "us-central1-a", "spot")]
    plan = run_cli("plan", str(spec_path), "--live", "--json", env=fakes.env(tmp_path))
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)["pools"]
    assert [(p["region"], p["bucket"]) for p in planned] == [
        ("europe-west4", f"{PROJECT}-tpuops-europe-west4"), ("us-central1", f"{PROJECT}-tpuops-us-central1")]
    # 24 of the 64 granted v6e chips are held: a v6e-64 no longer fits; the v5e grant is untouched
    assert planned[0]["quota"] == f"NOT covered: needs 64 chips, 40 of 64 free in {ZONE} ({SPOT_ZONE})"
    assert planned[1]["quota"] == "covered: 64 of 64 chips free in us-central1-a"


THREE_POOLS = """
name: three
project: trc-project
tpu:
  pools:
    - {type: v6e-8, zone: europe-west4-a, provisioning: spot}
    - {type: v5litepod-8, zone: us-central1-a, provisioning: preemptible}
    - type: v4-32
      zone: us-central2-b
      provisioning: on-demand
bucket:
  name: three-{region}
trainer: {framework: jax, command: python3 train.py}
"""


def test_plan_shows_every_pool_with_region_price_and_bucket(fakes: Fakes, tmp_path: Path) -> None:
    path = write_spec(tmp_path, THREE_POOLS)
    result = run_cli("plan", str(path), env=fakes.env(tmp_path))
    assert result.returncode == 0, result.stderr
    pools = [line.split() for line in result.stdout.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")]
    assert pools == [
        ["1.", "v6e-8", ZONE, "region", "europe-west4", "spot", "$9.76/h", "bucket", "three-europe-west4"],
        ["2.", "v5litepod-8", "us-central1-a", "region", "us-central1", "preemptible", "$4.32/h", "bucket",
         "three-us-central1"],
        ["3.", "v4-32", "us-central2-b", "region", "us-central2", "on-demand", "$51.52/h", "bucket",
         "three-us-central2"]]
    assert not fakes.tpu_api.server.requests and not fakes.quotas_api.server.requests


ACROSS_POOLS = """
name: across
project: trc-project
tpu:
  pools:
    - {type: v6e-8, zone: europe-west4-a, provisioning: spot}
    - {type: v6e-8, zone: us-east1-d, provisioning: spot}
    - {type: v5litepod-8, zone: us-central1-a, provisioning: spot}
trainer: {framework: jax, command: python3 train.py}
"""


def test_up_skips_a_full_pool_and_one_without_quota_and_lands_in_the_third(fakes: Fakes, tmp_path: Path) -> None:
    a_trc_grant(fakes)  # v6e spot in europe-west4-a, v5e spot in us-central1-a; nothing in us-east1-d
    fakes.tpu.capacity_failures[ZONE] = -1
    try:
        result = run_cli("up", str(write_spec(tmp_path, ACROSS_POOLS)), "--json", env=fakes.env(tmp_path))
    finally:
        fakes.tpu.capacity_failures.clear()
    assert result.returncode == 0, result.stderr
    up = json.loads(result.stdout)
    assert up["pool"] == "v5litepod-8 spot in us-central1-a"
    assert [(action["verb"], action["kind"], action["zone"]) for action in up["created"]] == [
        ("create", "tpu", "us-central1-a")]
    no_quota, full = up["skipped_pools"]  # the quota is read before any pool is tried
    assert no_quota == f"v6e-8 spot in us-east1-d: no quota (needs 8 chips, 0 of 0 free in us-east1-d ({SPOT_ZONE}))"
    assert full.startswith(f"v6e-8 spot in {ZONE}: no capacity for v6e-8")
    assert list(fakes.tpu.nodes) == [("us-central1-a", "across")]
    creates = [request.path for request in fakes.tpu_api.server.calls("POST", r"/nodes$")]
    assert [path.split("/locations/")[1].split("/")[0] for path in creates] == [ZONE, "us-central1-a"], creates
    state = json.loads((tmp_path / "clusters" / "across" / "state.json").read_text())
    assert (state["zone"], state["pool"]) == ("us-central1-a", "v5litepod-8 spot in us-central1-a")


def test_up_deletes_a_tpu_in_a_pool_the_spec_no_longer_names(fakes: Fakes, tmp_path: Path) -> None:
    a_trc_grant(fakes)
    fakes.tpu.capacity_failures[ZONE] = -1
    try:
        first = run_cli("up", str(write_spec(tmp_path, ACROSS_POOLS)), env=fakes.env(tmp_path))
    finally:
        fakes.tpu.capacity_failures.clear()
    assert first.returncode == 0, first.stderr
    assert list(fakes.tpu.nodes) == [("us-central1-a", "across")]
    without_v5e = ACROSS_POOLS.replace("    - {type: v5litepod-8, zone: us-central1-a, provisioning: spot}\n", "")
    again = run_cli("up", str(write_spec(tmp_path, without_v5e)), "--json", env=fakes.env(tmp_path))
    assert again.returncode == 0, again.stderr
    deletes = [request.path for request in fakes.tpu_api.server.calls("DELETE", r"/nodes/across$")]
    assert deletes == [f"/v2/projects/{PROJECT}/locations/us-central1-a/nodes/across"]
    assert list(fakes.tpu.nodes) == [(ZONE, "across")] and json.loads(again.stdout)["pool"] == f"v6e-8 spot in {ZONE}"


def test_up_refuses_with_nothing_created_when_no_pool_has_quota(fakes: Fakes, tmp_path: Path) -> None:
    fakes.quotas.grant(SPOT_ZONE, {})  # every pool at Google's default of nothing
    result = run_cli("up", str(write_spec(tmp_path, ACROSS_POOLS)), env=fakes.env(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "no pool of across has quota for its TPU" in result.stderr and "`tpuops quota`" in result.stderr
    assert not fakes.tpu_api.server.calls("POST", r"")


# ------------------------------------------------------------------------------------------ pools in the spec


def test_the_single_form_is_one_pool(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, """
        name: one
        zone: us-central2-b
        tpu: {type: v4-8, spot: true}
        bucket: {name: one-data}
    """))
    assert [(p.type, p.zone, p.provisioning, p.runtime) for p in spec.pools()] == [
        ("v4-8", "us-central2-b", "spot", None)]
    assert spec.bucket_for("europe-west4") == "one-data"


def test_pools_fill_what_single_pool_readers_see(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, THREE_POOLS))
    assert (spec.zone, spec.tpu.type, spec.tpu.spot, spec.tpu.preemptible) == (ZONE, "v6e-8", True, False)
    assert spec.bucket.name == "three-europe-west4" and spec.bucket_for("us-central2") == "three-us-central2"
    assert [p.reservation for p in spec.pools()] == [None, None, None]


@pytest.mark.parametrize(("change", "error"), [
    (("provisioning: on-demand", "provisioning: cheap"),
     "spec.yaml:9: tpu.pools.2.provisioning: Input should be 'spot', 'preemptible' or 'on-demand', got 'cheap'"),
    (("provisioning: on-demand", "provisioning: on-demand\n      colour: red"),
     "spec.yaml:10: tpu.pools.2.colour: unknown key 'colour'"),
    (("      zone: us-central2-b\n", ""), "spec.yaml:7: tpu.pools.2.zone: required key is missing"),
    (("type: v4-32", "type: v4-33"), "spec.yaml:7: tpu.pools.2.type: v4-33 is not a v4 size"),
    (("tpu:\n", "tpu:\n  type: v4-8\n"), "spec.yaml:3: tpu: tpu.pools replaces tpu.type"),
    (("  pools:\n", "  pools: []\n  unused:\n"), "spec.yaml:4: tpu.pools: List should have at least 1 item"),
    (("project: trc-project\n", "project: trc-project\nzone: us-east1-d\n"),
     "spec.yaml: zone: us-east1-d is not the first pool's zone europe-west4-a"),
])
def test_a_bad_pool_names_file_line_and_field(tmp_path: Path, change: tuple[str, str], error: str) -> None:
    from tpuops.ops.specs import check_spec_file

    text = THREE_POOLS.replace(*change)
    if "pools: []" in text:
        text = text.split("  unused:")[0] + "bucket:\n  name: three-{region}\n"
    with pytest.raises(SpecError) as raised:
        check_spec_file(write_spec(tmp_path, text))
    assert str(raised.value).startswith(str(tmp_path / error)), str(raised.value)


# ------------------------------------------------------------------------------------------ the simulator


def test_the_simulator_answers_quota_from_its_grant(tmp_path: Path) -> None:
    from tpuops.cloud.local import make_cloud

    env = {"TPUOPS_HOME": str(tmp_path)}
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "quota.json").write_text(json.dumps({"limits": [
        {"generation": "v4", "kind": "spot", "zone": "local", "limit": 32},
        {"generation": "v4", "kind": "on-demand", "zone": "local", "limit": 0}]}))
    make_cloud(tmp_path / "local").tpus.create_node(
        TpuRequest("held", "local", "v4-8", "tpu-ubuntu2204-base", spot=True, workers=1))
    result = run_cli("quota", "--local", "--json", env=env)
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)["quota"]
    assert (row["generation"], row["kind"], row["limit"], row["used"], row["free"], row["granted"]) == (
        "v4", "spot", 32, 8, 24, True)
    written = run_cli("init", "--from-quota", "--local", str(tmp_path / "rehearse.yaml"), env=env)
    assert written.returncode == 0, written.stderr
    planned = run_cli("plan", str(tmp_path / "rehearse.yaml"), "--live", "--json", env=env)
    assert planned.returncode == 0, planned.stderr
    assert [(p["type"], p["zone"], p["provisioning"], p["quota"]) for p in json.loads(planned.stdout)["pools"]] == [
        ("v4-32", "local", "spot", "NOT covered: needs 32 cores, 24 of 32 free in local (simulated-v4-spot-local)")]
    (tmp_path / "local" / "quota.json").write_text("{not json")
    broken = run_cli("quota", "--local", env=env)
    assert broken.returncode == 1 and "quota.json is unreadable" in broken.stderr


def test_plan_prices_a_move_and_warns_of_a_bucket_in_another_region(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with open(tmp_path / "data" / "train.bin", "wb") as sparse:  # 40 GiB as its size says, nothing on disk
        sparse.truncate(40 << 30)
    spec = THREE_POOLS.replace("trainer: {framework: jax, command: python3 train.py}", """data: [{from: data, to: "gs://three-{region}/data"}]
trainer:
  framework: jax
  command: python3 train.py --data gs://three-europe-west4/data/train.bin
  checkpoints: "gs://three-{region}/ckpt"
""")
    result = run_cli("plan", str(write_spec(tmp_path, spec)), "--json", env={"TPUOPS_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    moves = [pool["move"] for pool in plan["pools"]]
    assert moves[0] is None
    assert moves[1] == ("from europe-west4: data gs://three-europe-west4/data 40.0 GiB = $2.00 at $0.05/GiB "
                        "(size unknown: checkpoints gs://three-europe-west4/ckpt)")
    assert moves[2].startswith("from europe-west4: data gs://three-europe-west4/data 40.0 GiB = $2.00 at $0.05/GiB")
    reads = [w for w in plan["warnings"] if "reads gs://three-europe-west4/data/train.bin" in w]
    assert [w.split("TPU runs in ")[1].split(":")[0] for w in reads] == ["us-central1", "us-central2"]
    assert "$0.05/GiB, $2.00 per epoch over 40.0 GiB at list price" in reads[0]


def test_a_pool_with_a_reservation_is_queued_from_it_and_needs_a_queued_resource(fakes: Fakes,
                                                                                  tmp_path: Path) -> None:
    reserved = """
name: reserved
project: trc-project
tpu:
  queued: true
  pools:
    - {type: v6e-8, zone: europe-west4-a, provisioning: on-demand, reservation: my-reservation}
trainer: {framework: jax, command: python3 train.py}
"""
    no_queue = run_cli("up", str(write_spec(tmp_path, reserved.replace("  queued: true\n", ""))),
                       env=fakes.env(tmp_path))
    assert no_queue.returncode == 2 and "through a queued resource: set tpu.queued: true" in no_queue.stderr
    assert not fakes.tpu_api.server.requests
    result = run_cli("up", str(write_spec(tmp_path, reserved)), env=fakes.env(tmp_path))
    assert result.returncode == 0, result.stderr
    queued = fakes.tpu.queued[(ZONE, "reserved-qr")]
    assert queued.reservation == f"projects/{PROJECT}/locations/{ZONE}/reservations/my-reservation"
    assert not fakes.quotas_api.server.requests  # one pool: no placement, no quota asked


def test_pool_health_counts_preemptions_and_waits_and_orders_the_pools(tmp_path: Path) -> None:
    from datetime import datetime, timedelta, timezone

    from tpuops.ops.pool_health import by_health, pool_health
    from tpuops.state import ClusterState, EventRecord

    now = datetime(2026, 11, 27, 12, tzinfo=timezone.utc)

    def at(hours_ago: float) -> str:
        return (now - timedelta(hours=hours_ago)).isoformat()

    west, east = "v6e-8 spot in europe-west4-a", "v5litepod-8 spot in us-central1-a"
    events = [EventRecord(at=at(48), kind="placed", message=f"in pool {west} after 30.0s"),
              *(EventRecord(at=at(h), kind="preempted", message=f"TPU PREEMPTED in pool {west}") for h in (40, 20, 2)),
              EventRecord(at=at(1), kind="placed", message=f"in pool {east} after 600.0s"),
              EventRecord(at=at(200), kind="preempted", message=f"TPU PREEMPTED in pool {east}")]  # older than a week
    state = ClusterState(name="a", provider="gcp", project=PROJECT, spec_path="x", events=events)
    health = {h.pool: h for h in pool_health([state], now.timestamp())}
    assert (health[west].preemptions, round(health[west].days, 1), health[west].capacity_seconds) == (3, 2.0, 30.0)
    assert health[west].preemptions_per_day == 1.5
    assert (health[east].preemptions, health[east].capacity_seconds) == (0, 600.0)
    spec = load_spec(write_spec(tmp_path, ACROSS_POOLS.replace("  pools:", "  order: health\n  pools:")))
    assert spec.tpu.order == "health"
    ordered = [pool.label for pool in by_health(spec.pools(), [state], now.timestamp())]
    # never used (no history) and the v5e pool (no preemption this week) before the pool that preempts daily
    assert ordered == ["v6e-8 spot in us-east1-d", east, west]


def test_which_quota_each_provisioning_draws_on() -> None:
    """One rule for placement, `plan --live`, the holdings and `init --from-quota`: spot and preemptible TPUs
    draw on Google's preemptible quota ("spot"), on-demand ones on the on-demand quota."""
    assert {p: quota_kind(p) for p in get_args(Provisioning)} == \
        {"spot": "spot", "preemptible": "spot", "on-demand": "on-demand"}
    assert [quota_kind_of(spot, preemptible) for spot, preemptible in [(True, False), (False, True), (False, False)]] \
        == ["spot", "spot", "on-demand"]
    for kind in get_args(QuotaKind):  # a pool `init --from-quota` writes draws on the quota it was written for
        assert provisioning_for(kind) in get_args(Provisioning) and quota_kind(provisioning_for(kind)) == kind
