"""The guard's own parts, over a `BlobStore` and the cluster's access (nothing here imports a workflow): the
lease in the bucket so that one recoverer acts at a time (`lease.py`), the ledger of what it did (`ledger.py`),
the heartbeat that renews the lease (`heartbeat.py`), the webhook (`notify.py`), the bundle `guard up` stages for
a guard VM (`bundle.py`) and what `status` says of the guard (`report.py`).

The guard's other parts carry its name in their layers: its spec section (`spec/guard.py`), its VM's plan and shape
(`plan/guard_vm*.py`, `plan/guard_reach.py`) and resource kind (`cloud/kinds/guard_vm.py`), its program shipped to
the VM (`shipped/guard_fetch_bundle.py`), its hosts (`providers/*guard*.py`), its place in the bucket and the state
it hands back (`access/guard_place.py`, `access/guard_state.py`), its workflows (`ops/guard.py`: guard up/down;
`ops/guard_loop.py`: the watch loop under a lease; `ops/guard_viewer.py`)."""
