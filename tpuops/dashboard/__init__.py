"""`tpuops dashboard`: a local, read-only web page over what the CLI reads (state, ledgers, event files,
incidents, the TPU API). Above the workflows like the CLI; nothing but the CLI imports it, and it writes nothing."""
