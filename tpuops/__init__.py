"""tpuops: one spec and a handful of commands for training on Google Cloud TPUs."""

__version__ = "0.1.0"
