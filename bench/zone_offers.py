"""What asking the zone costs `up`: `verify_zone_offers` on the wire fakes, per zone, median of runs.

The real tpu_v2 (REST) and tpu_v1 (gRPC) clients against tests/fakes. tpuops asks for pages of 500; the
fakes cap a page at 20 unless --page-cap says otherwise (the catalog's 54 types then take 3 pages, its
runtimes 1). "first zone" includes building the client (imports warmed up beforehand, as `up` has them by
then); "each further zone" reuses it, as `up` does for each fallback zone. `--latency` adds a round-trip
time to every listing call (a real API answers in tens of milliseconds).

    python bench/zone_offers.py [--runs 20] [--latency 0.05] [--page-cap 500]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.tpu_model import TpuModel  # noqa: E402
from tests.fakes.tpu_v1_grpc import TpuV1Fake  # noqa: E402
from tests.fakes.tpu_v2_http import TpuV2Fake  # noqa: E402
from tpuops.cloud.gcp import make_cloud  # noqa: E402
from tpuops.ops.offerings import verify_zone_offers  # noqa: E402
from tpuops.ops.specs import load_checked  # noqa: E402

PROJECT = "bench"
SPECS = {
    "vm": "name: b\nzone: europe-west4-a\ntpu: {type: v3-8, runtime: tpu-vm-tf-2.16.1-pjrt}\n",
    "node": "name: b\nzone: europe-west4-a\ntpu: {type: v3-8, mode: node, runtime: '2.12.0'}\n"
            "client_vm: {machine_type: n1-standard-2}\n",
}


def measure(v2: TpuV2Fake, v1: TpuV1Fake, spec_path: Path, runs: int) -> tuple[float, float]:
    env = {"CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": v2.server.url + "/", "TPUOPS_TPU_V1_GRPC_ENDPOINT": v1.endpoint}
    spec = load_checked(spec_path)
    first, following = [], []
    for _ in range(runs):
        cloud = make_cloud(env, PROJECT)
        start = time.perf_counter()
        assert verify_zone_offers(cloud, spec, "europe-west4-a") == []
        middle = time.perf_counter()
        assert verify_zone_offers(cloud, spec, "europe-west4-a") == []
        end = time.perf_counter()
        first.append(middle - start)
        following.append(end - middle)
    return statistics.median(first), statistics.median(following)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every listing call")
    parser.add_argument("--page-cap", type=int, default=20, help="most items the server puts in one page")
    args = parser.parse_args()
    model = TpuModel(PROJECT)
    model.listing_page_size = args.page_cap
    v2 = TpuV2Fake(model)
    v2.server.start()
    v1 = TpuV1Fake(model).start()
    try:
        if args.latency:
            for path in (r"/acceleratorTypes$", r"/runtimeVersions$"):
                v2.server.faults.delay("GET", path, args.latency)
            for rpc in ("ListAcceleratorTypes", "ListTensorFlowVersions"):
                v1.faults.delay("RPC", rpc, args.latency)
        with tempfile.TemporaryDirectory() as directory:
            for mode, text in SPECS.items():
                path = Path(directory) / f"{mode}.yaml"
                path.write_text(text)
                measure(v2, v1, path, 1)  # warm imports
                first, following = measure(v2, v1, path, args.runs)
                print(f"{mode:<5} first zone {first * 1000:7.1f} ms   each further zone {following * 1000:7.1f} ms")
    finally:
        v1.stop()
        v2.server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
