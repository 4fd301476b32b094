"""Durations as users write them on the command line and in specs: 90s, 30m, 2h, 1h30m (or plain seconds)."""

from __future__ import annotations

import re

from tpuops.errors import UsageError

DURATION_RE = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
OFF = "off"
BARE_NUMBER = re.compile(r"\d+(\.\d+)?")
WRITTEN_BY_USER = "written_by_user"  # validation context of a spec file: numbers there are a user's text


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h', '1h30m', or a number of seconds."""
    text = text.strip().lower()
    if BARE_NUMBER.fullmatch(text):
        return float(text)
    match = DURATION_RE.match(text)
    if not text or not match:
        raise UsageError(f"cannot read duration {text!r}", "write it like 90s, 30m, 2h or 1h30m")
    return float(int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60 + int(match["s"] or 0))


def run_time_seconds(text: str) -> float:
    """3d, 1d12h, 12h, 90m: a run time, days allowed (flex-start's limit is written in days)."""
    days, _, rest = text.strip().lower().rpartition("d")
    try:
        return (int(days) * 86400 if days else 0) + (parse_duration(rest) if rest else 0)
    except (UsageError, ValueError):
        raise ValueError(f"cannot read run time {text!r}: write it like 12h or 3d") from None


def parse_autostop(text: str) -> float | None:
    """An autostop idle time as a user writes it: a positive duration with its unit, or 'off' (None).

    A bare number is refused: SkyPilot reads `-i 10` as ten minutes, gcloud reads a bare duration as seconds,
    so either reading would surprise half of those users (a TPU deleted ten seconds after its run ended)."""
    if text.strip().lower() == OFF:
        return None
    bare = text.strip()
    if BARE_NUMBER.fullmatch(bare) and float(bare) > 0:
        raise UsageError(f"autostop time {bare} has no unit",
                         unit_hint(bare, f" (what `sky launch -i {bare}` means)"))
    try:
        seconds = parse_duration(text)
    except UsageError:
        raise UsageError(f"cannot read autostop time {text.strip()!r}",
                         "write it like 30m, 2h, 90s or 1h30m, or off to disable it") from None
    if seconds <= 0:
        raise UsageError(f"autostop time must be more than zero, got {text.strip()!r}",
                         "write it like 30m, 2h or 90s, or off to disable it")
    return seconds


def unit_hint(bare: str, minutes_note: str = "") -> str:
    """What to write instead of a bare number: minutes, or the same seconds with their unit."""
    number = float(bare)
    in_seconds = f"{format_duration(number)} for {bare} seconds" if number >= 60 else f"{bare}s for seconds"
    return f"write {bare}m for {bare} minutes{minutes_note}, or {in_seconds}"


def format_duration(seconds: float) -> str:
    """30m, 1h30m, 45s, 2d3h: the largest two units, as users write them."""
    total = int(round(seconds))
    if total < 60:
        return f"{total}s"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next(i for i, (value, _) in enumerate(parts) if value)
    return "".join(f"{value}{unit}" for value, unit in parts[first:first + 2] if value)
