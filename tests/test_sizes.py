"""The one byte-size formatter (tpuops/sizes.py), as the plan, push and status lines print it."""

from __future__ import annotations

import pytest

from tpuops.sizes import size_text


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), ((1 << 20) - 1, "1024.0 KiB"),
    (1 << 20, "1.0 MiB"), (12 * (1 << 20), "12.0 MiB"), (1 << 30, "1.0 GiB"), (5 << 40, "5120.0 GiB"),
])
def test_sizes_read_in_binary_units_with_one_decimal(size: int, text: str) -> None:
    assert size_text(size) == text
