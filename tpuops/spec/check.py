"""The spec's `check:` section: how `tpuops check` (and `--preflight`) runs the trainer on this machine.

    check: {command: null, env: {}}

`command` replaces trainer.command for the preflight run (a smaller configuration of the same code, e.g. the
same script with `--layers 2 --dim 64`); `env` is added to the trainer's environment for that run only. Both
are optional: by default the preflight runs trainer.command with TPUOPS_PREFLIGHT=1, which the templates read
as "shrink to a toy configuration of the same structure". A section of the spec beside the others (the check
itself, tpuops/check/, reads it from there).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CheckSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    command: str | None = Field(None, description="The command the preflight runs instead of trainer.command.")
    env: dict[str, str] = Field(default_factory=dict, description="Added to the trainer's environment by check.")

    @field_validator("command")
    @classmethod
    def _something_to_run(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("check.command is empty: leave it out to run trainer.command")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return env_names(value)


def env_names(value: dict[str, str]) -> dict[str, str]:
    """The variables of an `env:` map, refused at the first name a shell could not export."""
    for key in value:
        if not ENV_NAME.match(key):
            raise ValueError(f"{key!r} is not a valid environment variable name")
    return value
