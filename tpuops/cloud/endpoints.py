"""Endpoint URLs as users override them (gcloud's variables, STORAGE_EMULATOR_HOST): pure parsing, no SDK."""

from __future__ import annotations

from urllib.parse import urlsplit


def base_url(value: str | None) -> str | None:
    """gcloud's overrides carry a path ("https://compute.googleapis.com/compute/v1/"): keep scheme://host:port."""
    if not value:
        return None
    if "://" not in value:
        value = "http://" + value  # STORAGE_EMULATOR_HOST is often given as host:port
    parts = urlsplit(value)
    return f"{parts.scheme}://{parts.netloc}"
