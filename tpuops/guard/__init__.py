"""The guard: the watch loop run where the laptop is not (a small VM, or a detached local process), with a
lease in the bucket so that one recoverer acts at a time, and a ledger of what it did."""
