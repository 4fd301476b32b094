"""Wire-level fakes of the Google APIs tpuops talks to (TPU v2 REST, TPU v1 gRPC, Compute REST, GCS).

Each fake keeps a state model apart from its request handling (moto style), records every request and
injects faults per call; all of them listen on 127.0.0.1 only, on ports the OS picks.
"""
