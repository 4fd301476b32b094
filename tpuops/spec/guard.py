"""The spec's `guard:` section: `{enabled: false, zone: null, machine_type: e2-micro, service_account: null,
notify: null}`. Kept apart from spec.py (which adds it to `Spec` as one field), beside the guard it configures.

`notify` is a webhook URL, and a webhook URL is a secret (a Slack webhook's path is its credential): it is a
SecretStr, so printing the spec, a repr or a validation error never shows it, and it is never written to state.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

DEFAULT_MACHINE_TYPE = "e2-micro"


class GuardSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # enabled: 1 is not true (issue 22, 14)

    enabled: bool = Field(False, description="`up` and `run` start the guard too: recovery that outlives "
                                             "your laptop (a small VM on Google Cloud, a local process here).")
    zone: str | None = Field(None, description="The guard VM's zone; default: the TPU's.")
    machine_type: str = Field(DEFAULT_MACHINE_TYPE, description="The guard VM's machine type.")
    service_account: str | None = Field(None, description="The guard VM's service account (email); default: "
                                                          "the project's Compute default one.")
    notify: SecretStr | None = Field(None, description="A webhook (https URL) that gets one JSON POST per event "
                                                       "worth waking up for. A secret: never printed or stored.")

    @field_validator("notify")
    @classmethod
    def _webhook(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(("https://", "http://")):
            raise ValueError("guard.notify must be an http(s):// webhook URL")  # the value itself is not repeated
        return value
