"""The spec's `watch:` section: what the hang watchdog reads as progress and when it calls a run hung.

    watch: {watchdog: true, progress: null, hang_after: null}

Kept in the watchdog's room (spec.py adds it to `Spec` as one field), as `autostop:` and `guard:` are in guard/.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    WithJsonSchema,
    field_validator,
)

from tpuops.durations import BARE_NUMBER, parse_duration, unit_hint
from tpuops.errors import UsageError

# Step numbers in worker 0's output when the spec gives no pattern: "step 120", "Step: 120", "step=120", "step #120".
DEFAULT_PROGRESS = r"(?i)\bstep\b\D{0,3}?(\d+)"


def _seconds(value: Any) -> float | None:
    """null (automatic), a number of seconds, or a duration like 20m."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"cannot read {value!r} as a duration (write it like 20m, 1h or 900, or null)")
    try:
        seconds = parse_duration(str(value))
    except UsageError:
        raise ValueError(f"cannot read {value!r} as a duration (write it like 20m, 1h or 900, or null)") from None
    if seconds <= 0:
        raise ValueError("hang_after must be more than zero (null: automatic)")
    if seconds < 60 and BARE_NUMBER.fullmatch(str(value).strip()):  # `10` meant as minutes would restart runs
        raise ValueError(f"hang_after {value} has no unit and would be {value} seconds: {unit_hint(str(value))}")
    return seconds


HangSeconds = Annotated[
    float | None,
    BeforeValidator(_seconds),
    WithJsonSchema({
        "anyOf": [{"type": "string", "pattern": r"^((\d+h)?(\d+m)?(\d+s)?|\d+(\.\d+)?)$"},
                  {"type": "number", "exclusiveMinimum": 0}, {"type": "null"}],
        "description": "Call the run hung after this long without a new step (null: 10 x the median gap "
                       "between steps, at least 15m, at most 60m).",
    }),
]


class WatchSpec(BaseModel):
    """How `tpuops watch` judges progress (see docs/watchdog.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # enabled: 1 is not true (issue 22, 14)

    watchdog: StrictBool = Field(True, description="Detect, capture and restart a run that stopped making progress.")
    progress: StrictStr | None = Field(
        None, description="Regular expression whose first group is the step number in worker 0's output, for a "
        "trainer that writes no TensorBoard scalars (default: 'step N' in its usual spellings).")
    hang_after: HangSeconds = None

    @field_validator("progress")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            compiled = re.compile(value)
        except re.error as err:
            raise ValueError(f"progress: bad regular expression {value!r}: {err}") from None
        if compiled.groups < 1:
            raise ValueError(f"progress: {value!r} needs a group around the step number, e.g. 'step (\\d+)'")
        return value

    @property
    def progress_pattern(self) -> str:
        return self.progress or DEFAULT_PROGRESS
