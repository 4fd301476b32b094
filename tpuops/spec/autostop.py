"""The spec's `autostop:` section: `{idle: 30m, max_hours: null}`, off by default.

Kept apart from spec.py (which adds it to `Spec` as one field) so the duration rules live next to the
parser they share with the CLI's `--autostop` and `tpuops autostop NAME 30m|off`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, WithJsonSchema

from tpuops.durations import WRITTEN_BY_USER, format_duration, parse_autostop
from tpuops.errors import UsageError


def _idle_seconds(value: Any, info: ValidationInfo) -> float | None:
    """YAML gives '30m', 'off', or null; the model keeps seconds (None: off). A number is seconds where tpuops
    wrote it (the state's record); in a spec file it is a user's bare number, refused as on the command line."""
    if value is None or value is False:
        return None
    if isinstance(value, bool):
        raise ValueError("write a duration like 30m, 2h or 90s, or off")
    if isinstance(value, (int, float)):
        if not (info.context or {}).get(WRITTEN_BY_USER):
            return float(value)
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"cannot read {value!r} as a duration (write it like 30m, 2h or 90s, or off)")
    try:
        return parse_autostop(value)
    except UsageError as err:
        raise ValueError(str(err)) from None


IdleSeconds = Annotated[
    float | None,
    BeforeValidator(_idle_seconds),
    WithJsonSchema({
        "anyOf": [{"type": "string", "pattern": r"^(off|(\d+h)?(\d+m)?(\d+s)?)$"}, {"type": "null"}],
        "description": "Delete the TPU after this long with no run alive and no process holding the TPU: "
                       "30m, 2h, 90s, or off (default). A number needs its unit: 10m, not 10.",
    }),
]


class AutostopSpec(BaseModel):
    """When the agent on worker 0 deletes the TPU by itself (see `tpuops autostop`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # max_hours: true is not 1 hour

    idle: IdleSeconds = None
    max_hours: float | None = Field(
        None, gt=0, description="Delete the TPU this many hours after it was created, whatever runs (a hard cap)."
    )

    @property
    def enabled(self) -> bool:
        return self.idle is not None or self.max_hours is not None

    def describe(self) -> str:
        """'idle 30m, max 12h' / 'idle 30m' / 'off', as plan and status print it."""
        parts = []
        if self.idle is not None:
            parts.append(f"idle {format_duration(self.idle)}")
        if self.max_hours is not None:
            parts.append(f"max {self.max_hours:g}h")
        return ", ".join(parts) or "off"
