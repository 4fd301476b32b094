"""The watchdog's knobs: defaults, the spec's `watch:` section, and TPUOPS_WATCHDOG_* overrides (tests use
seconds where users have minutes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from tpuops.errors import UsageError
from tpuops.spec.watch import DEFAULT_PROGRESS, WatchSpec

ENV_PREFIX = "TPUOPS_WATCHDOG_"
ENABLED_ENV = "TPUOPS_WATCHDOG"  # 0: no watchdog at all in this watch
INSTALL_ENV = "TPUOPS_WATCHDOG_INSTALL"  # 0: launch does not install py-spy on the workers


@dataclass(frozen=True)
class WatchdogSettings:
    enabled: bool = True
    progress: str = DEFAULT_PROGRESS
    hang_after: float | None = None  # the spec's watch.hang_after, used as given
    factor: float = 10.0  # T = clamp(factor x median gap, min_hang, max_hang)
    min_hang: float = 15 * 60.0
    max_hang: float = 60 * 60.0
    min_gaps: int = 3  # fewer gaps than this: T = max_hang (too little to know the pace)
    confirm_gap: float = 60.0  # between the two probes of the confirmation
    restarts_per_window: int = 2
    window: float = 3600.0
    status_every: float = 60.0  # at most one write of the watchdog's view to the bucket this often

    @classmethod
    def from_spec(cls, spec: WatchSpec | None, env: Mapping[str, str]) -> WatchdogSettings:
        settings = cls()
        if spec is not None:
            settings = replace(settings, enabled=spec.watchdog, progress=spec.progress_pattern,
                               hang_after=spec.hang_after)
        return settings.with_env(env)

    def with_env(self, env: Mapping[str, str]) -> WatchdogSettings:
        """TPUOPS_WATCHDOG_MIN_HANG=2 and friends: the field's name in capitals; TPUOPS_WATCHDOG=0 turns it off."""
        values: dict[str, object] = {}
        if env.get(ENABLED_ENV):
            values["enabled"] = env[ENABLED_ENV] not in ("0", "false", "off")
        for item in fields(self):
            text = env.get(ENV_PREFIX + item.name.upper())
            if not text or item.name == "enabled":
                continue
            values[item.name] = _number(item.name, text, int if item.name in ("min_gaps", "restarts_per_window")
                                        else float) if item.name != "progress" else text
        return replace(self, **values)  # type: ignore[arg-type]


def _number(name: str, text: str, kind: type) -> float | int:
    try:
        return kind(text)
    except ValueError:
        raise UsageError(f"{ENV_PREFIX}{name.upper()}={text!r} is not a number",
                         "give seconds (or a count) as a plain number") from None
