"""tpuops: libtpu's runtime metrics on this worker, as one line: `metrics {json}` or `metrics-unavailable WHY`.

Run on a worker as `python3 -c TEXT PORT` (standard library, plus the tpu-info package's gRPC client where the
worker has it). It asks libtpu's local metrics server what `tpu-info` shows: per-chip duty cycle, the HLO
queue size per core, and each core's sequencer state (run id and program counter), its program fingerprint
and queued programs. A value that cannot be read is left out, with the reason under "errors".
"""

import json
import sys


def main(port):
    try:
        import grpc
        from tpu_info.proto import tpu_metric_service_pb2 as pb
        from tpu_info.proto import tpu_metric_service_pb2_grpc as pb_grpc
    except Exception as err:  # noqa: BLE001
        print(f"metrics-unavailable tpu-info is not installed here ({type(err).__name__}: pip install tpu-info)")
        return
    channel = grpc.secure_channel(f"localhost:{port}", grpc.local_channel_credentials())
    stub = pb_grpc.RuntimeMetricServiceStub(channel)
    found, errors = {}, {}

    def gauge(name):
        response = stub.GetRuntimeMetric(pb.MetricRequest(metric_name=name), timeout=10)
        values = []
        for metric in response.metric.metrics:
            kind = metric.gauge.WhichOneof("value")
            values.append(getattr(metric.gauge, kind) if kind else None)
        return values

    for key, name in (("duty_cycle_pct", "tpu.runtime.tensorcore.dutycycle.percent"),
                      ("hlo_queue_size", "hlo.queue.size.gauge")):
        try:
            found[key] = gauge(name)
        except Exception as err:  # noqa: BLE001
            errors[key] = f"{type(err).__name__}: {err}"[:200]
    try:
        status = stub.GetTpuRuntimeStatus(pb.GetTpuRuntimeStatusRequest(include_hlo_info=False), timeout=10)
        cores = []
        for core_id in sorted(status.core_states):
            core = status.core_states[core_id]
            cores.append({"core": core_id,
                          "sequencers": [[s.run_id, s.pc] for s in core.sequencer_info],
                          "queued": len(core.queued_program_info),
                          "fingerprint": core.program_fingerprint.hex(),
                          "error": core.error_message if core.HasField("error_message") else None})
        found["cores"] = cores
    except Exception as err:  # noqa: BLE001
        errors["cores"] = f"{type(err).__name__}: {err}"[:200]
    if not found:
        print("metrics-unavailable the metrics server did not answer: " + "; ".join(errors.values()))
        return
    print("metrics " + json.dumps({**found, "errors": errors}, separators=(",", ":")))


main(sys.argv[1] if len(sys.argv) > 1 else "8431")
