"""The spec: its models (`spec/model.py`, with each feature's section beside it in this package) and how a YAML
file becomes one, with file:line:field errors (`spec/loading.py`). Callers import what they need from here."""

from tpuops.spec.loading import LineIndex, load_spec, load_spec_with_lines, parse_spec, read_spec_text
from tpuops.spec.model import (
    CLUSTER_LABEL,
    LOCAL_ZONE,
    NAME_RE,
    BucketSpec,
    ClientVmSpec,
    CodeSpec,
    DataItem,
    LogsSpec,
    Spec,
    SshSpec,
    TpuSpec,
    TrainerSpec,
    bucket_name_problem,
    region_of,
)

__all__ = ["CLUSTER_LABEL", "LOCAL_ZONE", "NAME_RE", "BucketSpec", "ClientVmSpec", "CodeSpec", "DataItem",
           "LineIndex", "LogsSpec", "Spec", "SshSpec", "TpuSpec", "TrainerSpec", "bucket_name_problem", "load_spec",
           "load_spec_with_lines", "parse_spec", "read_spec_text", "region_of"]
