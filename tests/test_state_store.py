"""The state store: what a thread only observed never writes back a cluster another thread deleted."""

from __future__ import annotations

import threading
from pathlib import Path

from tpuops.state import ClusterState, StateStore


def test_an_observation_does_not_bring_back_a_deleted_cluster(tmp_path: Path) -> None:
    """`run --down` deletes the cluster while its follow thread, the run just stopped, records the workers' last
    states: the record must stay deleted (a state file left behind says a TPU still bills)."""
    store = StateStore(tmp_path)
    state = ClusterState(name="interrupted", provider="local", spec_path=str(tmp_path / "spec.yaml"))
    store.save(state)
    observed = store.load("interrupted")
    assert observed is not None and store.remember(observed)
    store.delete("interrupted")
    assert store.remember(observed) is False
    assert store.load("interrupted") is None and store.names() == []


def test_observations_and_deletion_from_threads_leave_no_record(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    state = ClusterState(name="raced", provider="local", spec_path=str(tmp_path / "spec.yaml"))
    store.save(state)
    stop = threading.Event()

    def observe() -> None:
        while not stop.is_set():
            store.remember(state)

    observers = [threading.Thread(target=observe, daemon=True) for _ in range(4)]
    for observer in observers:
        observer.start()
    try:
        store.delete("raced")
    finally:
        stop.set()
        for observer in observers:
            observer.join(timeout=10)
    assert not any(observer.is_alive() for observer in observers)
    assert store.load("raced") is None
