"""Byte counts as people read them, for every layer's messages (plan, push, status): one formatter, so a size
reads the same wherever tpuops prints it."""

from __future__ import annotations

GIB = 1 << 30


def size_text(size: int) -> str:
    """`512 B`, `1.5 KiB`, `12.0 MiB`, `3.2 GiB`: binary units, one decimal above bytes, GiB the largest."""
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
