"""What every workflow and feature needs of a cluster, below them all: the cluster's access (`cluster.py`: name,
state and spec loaded once, runners, paths, logdir), its workers as targets (`workers.py`), and the guard's part
of it (`guard_place.py`: where the guard keeps its records in the bucket; `guard_state.py`: the state a guard VM
changed, merged back into the laptop's)."""
