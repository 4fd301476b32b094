"""Loaded by every Python process the tests start (via PYTHONPATH): refuse non-loopback connections.

Nothing in the test suite may reach Google or any other non-loopback address; a test that would is
made to fail loudly here instead of silently depending on the network or on credentials.
"""

from tests_netguard_impl import install  # noqa: F401  (import has the side effect)
