"""Where a cluster lives, over the cloud adapters and the resource kinds: the `Provider` protocol (`base.py`) and
its two implementations (`gcp.py`: Google Cloud; `local.py`: the simulator on this machine), the blob store a
gs:// or local URL opens (`blob_urls.py`), and the guard's hosts (`guard_host.py`: the protocol;
`gcp_guard_host.py` with `guard_startup.py` and `guard_wheel.py`: a small VM; `local_guard_host.py`: a detached
local process). `Context.provider_for` alone chooses one; nothing above asks which it has."""
