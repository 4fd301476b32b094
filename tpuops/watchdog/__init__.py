"""The hang watchdog: a judge of progress beside watch's judge of the TPU's state.

`progress` follows the step series (TensorBoard scalars through `tpuops.logs`, or step numbers in worker 0's
output) and says when a run is suspected hung; `confirm` asks every worker over SSH (trainer processes,
libtpu's runtime metrics) and classifies; `capture` saves stacks, output tails and metrics into the bucket
before anything is killed; `policy` decides restart, re-create or stop; `judge` ties them together for
`ops/watch.py`. Nothing here imports the CLI.
"""
