"""`tpuops check`: an XLA preflight of a trainer before TPU hours are paid.

Two halves: `lint` reads the trainer's source with `ast` (no framework imported) and names the patterns that
break or slow XLA; `run` + `compiles` run the trainer for a few steps under XLA on this machine's CPU and read
each framework's own compilation reports for recompilation storms, compile failures and host round trips.
"""
