"""Settings the entry point fills in once it knows the device."""
XLA_CFG = {"is_xla": False}
