"""Keeping the recorded runs true when their workers go away."""

from __future__ import annotations

from tpuops.state import ClusterState

DELETED_WITH_THE_TPU = "deleted with the TPU"


def end_runs_with_the_tpu(state: ClusterState) -> None:
    """The TPU (or client VM) was deleted: no worker still runs anything, whatever was last recorded.

    Without this, `status` after `down` (or an interrupted `run --down`) would show `w0: running (as last
    recorded)` for workers that no longer exist."""
    for run in state.runs:
        for worker, worker_state in run.worker_states.items():
            if worker_state in ("setup", "starting", "running"):
                run.worker_states[worker] = DELETED_WITH_THE_TPU
        for worker in run.workers:
            run.worker_states.setdefault(worker, DELETED_WITH_THE_TPU)
