"""The zone's TPU API decides: what a zone lists (TPU v2 REST, TPU v1 gRPC) through the real clients on the wire
fakes, `verify_zone_offers` on top of it, and `plan --live` / `tpuops catalog` as a user runs them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.quotas_http import QuotasFake, QuotasModel
from tests.fakes.tpu_model import TpuModel, ZoneListing, catalog_listing
from tests.fakes.tpu_v1_grpc import TpuV1Fake
from tests.fakes.tpu_v2_http import TpuV2Fake
from tests.helpers import run_cli, write_spec
from tests.test_spec import GOOD, NODE
from tpuops import catalog
from tpuops.cloud.base import Cloud
from tpuops.cloud.gcp import make_cloud
from tpuops.errors import SpecError
from tpuops.ops.offerings import verify_spec_zones, verify_zone_offers
from tpuops.ops.specs import load_checked

PROJECT = "tpuops-test"
ZONE = "europe-west4-a"


@dataclass
class TpuFakes:
    model: TpuModel
    v2: TpuV2Fake
    v1: TpuV1Fake
    quotas: QuotasFake  # `plan --live` asks the quota too

    @property
    def env(self) -> dict[str, str]:
        return {
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": self.v2.server.url + "/",
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDQUOTAS": self.quotas.url + "/",
            "TPUOPS_TPU_V1_GRPC_ENDPOINT": self.v1.endpoint,
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "TPUOPS_RETRY_INITIAL": "0.01",
            "TPUOPS_POLL_INTERVAL": "0.02",
        }

    def cloud(self) -> Cloud:
        return make_cloud(self.env, PROJECT)


@pytest.fixture
def tpu() -> Iterator[TpuFakes]:
    model = TpuModel(PROJECT)
    v2 = TpuV2Fake(model)
    v2.server.start()
    try:
        v1 = TpuV1Fake(model).start()
        quotas = QuotasFake(QuotasModel(PROJECT))
        quotas.server.start()
        try:
            yield TpuFakes(model, v2, v1, quotas)
        finally:
            quotas.server.stop()
            v1.stop()
    finally:
        v2.server.stop()


def spec_of(tmp_path: Path, text: str):  # noqa: ANN201  (tpuops.spec.Spec)
    (tmp_path / "shards").mkdir(exist_ok=True)
    return load_checked(write_spec(tmp_path, text))


def narrow(types: list[str], runtimes: list[str] = (), node_types: list[str] = (),
           node_versions: list[str] = ()) -> ZoneListing:
    return ZoneListing(list(types), list(runtimes), list(node_types), list(node_versions))


# ------------------------------------------------------------------------------------------ adapters


def test_tpu_vm_listing_follows_every_page(tpu: TpuFakes) -> None:
    offer = tpu.cloud().tpus.zone_offer(ZONE)
    listing = catalog_listing()
    assert offer is not None and (offer.zone, offer.mode) == (ZONE, "vm")
    assert list(offer.accelerator_types) == listing.accelerator_types
    assert list(offer.runtimes) == listing.runtimes
    pages = tpu.v2.server.calls("GET", r"/acceleratorTypes$")
    assert len(pages) == -(-len(listing.accelerator_types) // tpu.model.listing_page_size) > 1
    assert pages[1].query["pageToken"] == str(tpu.model.listing_page_size)


def test_legacy_node_listing_over_grpc(tpu: TpuFakes) -> None:
    tpu.model.listings[ZONE] = narrow(["v3-8"], node_types=["v2-8", "v3-8"], node_versions=["2.12.0", "pytorch-1.8"])
    offer = tpu.cloud().tpu_nodes.zone_offer(ZONE)
    assert offer is not None and offer.mode == "node"
    assert (offer.accelerator_types, offer.runtimes) == (("v2-8", "v3-8"), ("2.12.0", "pytorch-1.8"))
    assert [name for name, _ in tpu.v1.calls] == ["ListAcceleratorTypes", "ListTensorFlowVersions"]


def test_an_unknown_zone_is_none_on_both_apis(tpu: TpuFakes) -> None:
    tpu.model.unknown_zones.add("mars-north9-z")
    cloud = tpu.cloud()
    assert cloud.tpus.zone_offer("mars-north9-z") is None
    assert cloud.tpu_nodes.zone_offer("mars-north9-z") is None


def test_local_provider_offers_the_catalog_and_any_runtime(tmp_path: Path) -> None:
    from tpuops.cloud.local import make_cloud as make_local_cloud

    offer = make_local_cloud(tmp_path).tpus.zone_offer("local")
    assert offer.any_runtime and "v4-32" in offer.accelerator_types


# ------------------------------------------------------------------------------------ verify_zone_offers


def test_what_the_zone_offers_passes_even_when_the_catalog_does_not_list_it(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.model.listings[ZONE] = narrow(["v3-8"], node_types=["v3-8"], node_versions=["pytorch-1.8"])
    tpu.model.listings["us-central1-f"] = narrow([], node_types=["v2-8"], node_versions=["pytorch-1.8"])
    spec = spec_of(tmp_path, NODE.replace('"2.12.0"', "pytorch-1.8").replace("framework: tensorflow",
                                                                           "framework: pytorch"))
    assert verify_zone_offers(tpu.cloud(), spec, "us-central1-f") == []


@pytest.mark.parametrize(
    ("text", "listing", "message", "closest"),
    [
        (GOOD.replace("tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.18.0-pjrt"),
         narrow(["v3-8"], ["tpu-ubuntu2204-base", "tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.17.0-pjrt"]),
         "zone europe-west4-a does not offer runtime tpu-vm-tf-2.18.0-pjrt",
         "closest it offers: tpu-vm-tf-2.17.0-pjrt, tpu-vm-tf-2.16.1-pjrt"),
        (GOOD.replace("type: v3-8", "type: v3-32").replace("tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.16.1-pod-pjrt"),
         narrow(["v2-8", "v3-8", "v3-64", "v5litepod-8"], ["tpu-vm-tf-2.16.1-pod-pjrt"]),
         "zone europe-west4-a does not offer accelerator type v3-32", "closest it offers: v3-8, v3-64"),
        (GOOD.replace("type: v3-8", "type: v7-8"), narrow(["v3-8", "v6e-8"], ["tpu-vm-tf-2.16.1-pjrt"]),
         "does not offer accelerator type v7-8", "v6e-8"),
        (GOOD, narrow([], []), "does not offer accelerator type v3-8: it lists none", "tpuops catalog"),
    ],
)
def test_what_the_zone_does_not_offer_is_one_line_naming_the_closest(
        tpu: TpuFakes, tmp_path: Path, text: str, listing: ZoneListing, message: str, closest: str) -> None:
    tpu.model.listings[ZONE] = listing
    with pytest.raises(SpecError) as caught:
        verify_zone_offers(tpu.cloud(), spec_of(tmp_path, text), ZONE)
    assert message in caught.value.message and closest in (caught.value.hint or "")
    assert "\n" not in str(caught.value)
    assert not tpu.v2.server.calls("POST", r"/nodes$")


def test_the_default_runtime_is_checked_too(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.model.listings[ZONE] = narrow(["v3-8"], ["tpu-ubuntu2204-base"])
    spec = spec_of(tmp_path, GOOD.replace("  runtime: tpu-vm-tf-2.16.1-pjrt\n", ""))
    with pytest.raises(SpecError, match="does not offer runtime tpu-vm-tf-2.16.1-pjrt"):
        verify_zone_offers(tpu.cloud(), spec, ZONE)


def test_legacy_node_versions_come_from_tpu_v1(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.model.listings["us-central1-f"] = narrow(["v2-8"], ["2.12.0"], ["v2-8"], ["2.11.0", "pytorch-1.13"])
    with pytest.raises(SpecError, match="does not offer legacy TPU Node version 2.12.0") as caught:
        verify_zone_offers(tpu.cloud(), spec_of(tmp_path, NODE), "us-central1-f")
    assert "2.11.0" in (caught.value.hint or "")
    assert not tpu.v2.server.requests  # a Node's zone is asked through TPU v1 only


def test_each_fallback_zone_is_asked(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.model.listings["europe-west4-b"] = narrow(["v5litepod-8"], ["tpu-vm-tf-2.16.1-pjrt"])
    spec = spec_of(tmp_path, GOOD.replace("  type: v3-8", "  type: v3-8\n  zones: [europe-west4-b]"))
    with pytest.raises(SpecError, match="zone europe-west4-b does not offer accelerator type v3-8"):
        verify_spec_zones(tpu.cloud(), spec)
    asked = {call.path.split("/")[5] for call in tpu.v2.server.calls("GET", r"/acceleratorTypes$")}
    assert asked == {ZONE, "europe-west4-b"}


def test_an_unknown_zone_is_refused(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.model.unknown_zones.add("mars-north9-z")
    spec = spec_of(tmp_path, GOOD.replace(ZONE, "mars-north9-z"))
    with pytest.raises(SpecError, match="the TPU API does not know zone mars-north9-z"):
        verify_zone_offers(tpu.cloud(), spec, "mars-north9-z")


@pytest.mark.parametrize("status", [403, 503])
def test_a_listing_that_is_refused_or_keeps_failing_is_a_warning(tpu: TpuFakes, tmp_path: Path, status: int) -> None:
    tpu.v2.server.faults.http_error("GET", r"/runtimeVersions$", status, times=-1)
    warnings = verify_zone_offers(tpu.cloud(), spec_of(tmp_path, GOOD), ZONE)
    assert len(warnings) == 1 and f"could not ask zone {ZONE}" in warnings[0]
    assert "the create call will tell" in warnings[0]
    attempts = len(tpu.v2.server.calls("GET", r"/runtimeVersions$"))
    assert attempts == (1 if status == 403 else 6)  # 403 is not retried; 503 is, up to the retry policy's limit


def test_a_transient_failure_is_retried(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.v2.server.faults.http_error("GET", r"/acceleratorTypes$", 503, times=2)
    assert verify_zone_offers(tpu.cloud(), spec_of(tmp_path, GOOD), ZONE) == []


def test_a_refused_tpu_v1_listing_is_a_warning(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.v1.faults.http_error("RPC", "ListTensorFlowVersions", 403, times=-1)
    warnings = verify_zone_offers(tpu.cloud(), spec_of(tmp_path, NODE), "us-central1-f")
    assert len(warnings) == 1 and "permission denied" in warnings[0]


# ------------------------------------------------------------------------------------------ the CLI


def test_plan_live_refuses_what_the_zone_does_not_offer(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.model.listings[ZONE] = narrow(["v3-8"], ["tpu-vm-tf-2.16.1-pjrt"])
    (tmp_path / "shards").mkdir()
    path = write_spec(tmp_path, GOOD.replace("tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.18.0-pjrt"))
    offline = run_cli("plan", str(path), env=tpu.env)
    assert offline.returncode == 0, offline.stderr
    assert "tpu-vm-tf-2.18.0-pjrt is not in the catalog" in offline.stdout and not tpu.v2.server.requests
    live = run_cli("plan", str(path), "--live", env=tpu.env)
    assert live.returncode == 2
    assert live.stderr.strip().splitlines() == [
        "tpuops: error: zone europe-west4-a does not offer runtime tpu-vm-tf-2.18.0-pjrt (hint: closest it offers: "
        "tpu-vm-tf-2.16.1-pjrt; `tpuops catalog --live --zone europe-west4-a` lists all)"
    ]


def test_plan_live_passes_what_the_zone_offers(tpu: TpuFakes, tmp_path: Path) -> None:
    tpu.model.listings[ZONE] = narrow(["v3-8"], ["tpu-vm-tf-2.18.0-pjrt"])
    (tmp_path / "shards").mkdir()
    path = write_spec(tmp_path, GOOD.replace("tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.18.0-pjrt"))
    result = run_cli("plan", str(path), "--live", "--json", env=tpu.env)
    assert result.returncode == 0, result.stderr
    assert [w for w in json.loads(result.stdout)["warnings"] if "not in the catalog" in w]


def test_catalog_live_lists_what_the_api_says(tpu: TpuFakes) -> None:
    tpu.model.listings[ZONE] = narrow(["v3-8", "v7-8", "v2-8"], ["tpu-vm-tf-2.18.0-pjrt"], ["v2-8"], ["pytorch-1.8"])
    result = run_cli("catalog", "--zone", ZONE, "--live", "--json", env=tpu.env)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert [(t["type"], t["hosts"], t["chips"], t["node"]) for t in shown["types"]] == [
        ("v2-8", 1, 4, True), ("v3-8", 1, 4, False), ("v7-8", None, None, False)]
    v3_8 = catalog.load().accelerator("v3-8")
    assert v3_8 and shown["types"][1]["price_on_demand"] == pytest.approx(v3_8.price_per_hour(spot=False))
    assert (shown["runtimes"], shown["node_versions"]) == (["tpu-vm-tf-2.18.0-pjrt"], ["pytorch-1.8"])
    assert "TPU API" in shown["source"]
    text = run_cli("catalog", "--zone", ZONE, "--live", env=tpu.env)
    assert text.returncode == 0 and "v7-8" in text.stdout and "pytorch-1.8" in text.stdout


def test_catalog_without_live_needs_no_account(tmp_path: Path) -> None:
    result = run_cli("catalog", "--zone", "us-central2-b", "--json", env={"HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert {t["type"].split("-")[0] for t in shown["types"]} == {"v4", "v6e"}
    assert "tpu-vm-v4-base" in shown["runtimes"] and catalog.load().as_of in shown["source"]
    everything = run_cli("catalog")
    assert everything.returncode == 0 and "v5litepod-256" in everything.stdout and "europe-west4-a" in everything.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--live"], "--live asks one zone's TPU API (hint: pass --zone"),
    (["--zone", "europe"], "'europe' is not a zone name"),
])
def test_catalog_usage_errors(args: list[str], message: str) -> None:
    result = run_cli("catalog", *args)
    assert result.returncode == 2 and result.stderr.startswith(f"tpuops: error: {message}")


def test_every_init_template_plans_cleanly_in_a_fresh_directory(tmp_path: Path) -> None:
    from tpuops.ops.specs import INIT_TEMPLATES

    for template in INIT_TEMPLATES:
        directory = tmp_path / template
        directory.mkdir()
        assert run_cli("init", "--template", template, "spec.yaml", cwd=directory).returncode == 0
        planned = run_cli("plan", "spec.yaml", cwd=directory)
        assert planned.returncode == 0 and planned.stderr == "", (template, planned.stderr)
        warnings = [line for line in planned.stdout.splitlines() if line.startswith("warning:")]
        # The cloud templates run the user's own train.py, not written yet; the local one comes with its own.
        script = "trainer.command: runs train.py, which is not in code.path"
        assert all(("data source" in w and "before `tpuops push`" in w) or script in w for w in warnings), warnings
        assert (template == "local") == (not any(script in w for w in warnings)), warnings


def test_push_refuses_a_missing_data_source_in_one_line_before_sending_anything(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    spec = write_spec(tmp_path, """
        name: nodata
        provider: local
        tpu: {type: v2-8, workers: 1}
        bucket: {name: nodata-bucket}
        code: {path: ./code}
        data:
          - {from: ./shards, to: gs://nodata-bucket/shards}
        """)
    planned = run_cli("plan", str(spec))
    assert planned.returncode == 0 and "data source ./shards does not exist" in planned.stdout
    assert run_cli("up", str(spec)).returncode == 0
    pushed = run_cli("push", "nodata")
    assert pushed.returncode == 2
    assert pushed.stderr.strip().splitlines() == [
        f"tpuops: error: {spec}: data.0.from: data source ./shards does not exist (hint: create it or fix the spec; "
        "paths are relative to the spec file's directory)"
    ]
    assert not list(Path(os.environ["TPUOPS_HOME"]).glob("local/workers/nodata/*/tpuops/nodata/code"))
    assert run_cli("push", "nodata", "--code-only").returncode == 0
    assert list(Path(os.environ["TPUOPS_HOME"]).glob("local/workers/nodata/*/tpuops/nodata/code/train.py"))
    assert run_cli("down", "nodata", "--yes").returncode == 0
