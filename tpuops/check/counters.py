"""What the run did, by the frameworks' own counters: how many steps ran, and PyTorch/XLA's device-to-host
transfers per step.

PyTorch/XLA writes its metrics report at every step end when `XLA_METRICS_FILE` is set
(`[MetricsData; step=N]` then the report): the `MarkStep` counter is the number of steps that ended, the
`TransferFromDeviceTime` metric's samples and the `aten::_local_scalar_dense` counter are the reads of tensor
values (`.item()`, `float(t)`, `print(t)`). A read after every step end costs a device round trip every step
and compiles nothing new, so no compilation report shows it: these counters do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tpuops.check.findings import Finding

BLOCK = re.compile(r"^\[MetricsData; step=(\d+)\]$", re.MULTILINE)
COUNTER = re.compile(r"^Counter: (\S+)\n  Value: (\d+)", re.MULTILINE)
METRIC_SAMPLES = re.compile(r"^Metric: (\S+)\n  TotalSamples: (\d+)", re.MULTILINE)
TRANSFERS = "TransferFromDeviceTime"
SCALAR_READS = "aten::_local_scalar_dense"
STEP_ENDS = "MarkStep"
COMPILES = "UncachedCompile"
MIN_STEPS_FOR_A_PATTERN = 3  # fewer steps say nothing about "every step"
EVERY_STEP_SHARE = 0.8  # a read in at least this share of the steps after the first: a read every step


@dataclass(frozen=True)
class TorchCounters:
    """PyTorch/XLA's counters at each step end, in order."""

    step_ends: int  # MarkStep at the last report
    transfers: tuple[int, ...]  # TransferFromDeviceTime samples at each step end
    scalar_reads: tuple[int, ...]  # aten::_local_scalar_dense at each step end
    compiles: int = 0  # UncachedCompile at the last report: graphs compiled

    def as_dict(self) -> dict[str, int]:
        return {STEP_ENDS: self.step_ends, COMPILES: self.compiles, TRANSFERS: self.transfers[-1],
                SCALAR_READS: self.scalar_reads[-1]}

    @property
    def steps_with_a_read(self) -> int:
        """Steps (after the first) between whose end and the next one a tensor's value was read."""
        return sum(1 for before, after in zip(self.transfers, self.transfers[1:], strict=False) if after > before)


def read_torch_counters(path: Path) -> TorchCounters | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    starts = [m.start() for m in BLOCK.finditer(text)]
    if not starts:
        return None
    blocks = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=False)]
    transfers, reads, ends, compiles = [], [], 0, 0
    for block in blocks:
        counters = {name: int(value) for name, value in COUNTER.findall(block)}
        samples = {name: int(value) for name, value in METRIC_SAMPLES.findall(block)}
        transfers.append(samples.get(TRANSFERS, 0))
        reads.append(counters.get(SCALAR_READS, 0))
        ends = counters.get(STEP_ENDS, ends)
        compiles = counters.get(COMPILES, compiles)
    return TorchCounters(ends or len(blocks), tuple(transfers), tuple(reads), compiles)


def transfer_findings(counters: TorchCounters) -> list[Finding]:
    """XLA103 when the trainer read a tensor's value in (nearly) every step, with or without a new graph."""
    steps = len(counters.transfers) - 1  # the intervals between step ends
    if steps < MIN_STEPS_FOR_A_PATTERN or counters.steps_with_a_read < EVERY_STEP_SHARE * steps:
        return []
    return [Finding(
        "XLA103", "host-read",
        f"the trainer read tensor values from the device in {counters.steps_with_a_read} of {steps} steps: a "
        "device-to-host wait every step (it compiles nothing new, so only the counters show it)",
        "read values every N steps (`if step % N == 0`) or in `xm.add_step_closure`, and keep running sums on "
        "the device (total += loss.detach())",
        details=(f"torch_xla metrics at the last step end: {TRANSFERS} {counters.transfers[-1]} samples, "
                 f"{SCALAR_READS} {counters.scalar_reads[-1]}, {STEP_ENDS} {counters.step_ends}",))]
