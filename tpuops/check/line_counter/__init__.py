"""The directory put first on the trainer's PYTHONPATH so that its `sitecustomize.py` counts lines (a package only
so that it is installed with tpuops; nothing imports it)."""
