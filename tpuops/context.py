"""The one place that turns a spec and the environment into real clients and settings.

Workflows in `ops/` receive a `Context`; tests build one with their own environment (endpoints of the
local fakes, a temporary TPUOPS_HOME) instead of patching anything.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tpuops.cloud.base import Cloud
from tpuops.errors import UsageError
from tpuops.providers.base import Provider
from tpuops.spec import Spec
from tpuops.state import ClusterState, StateStore, tpuops_home


@dataclass
class Context:
    env: Mapping[str, str]
    store: StateStore
    project_override: str | None = None
    assume_yes: bool = False
    _cache: dict[str, object] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, project: str | None = None, assume_yes: bool = False,
                 env: Mapping[str, str] | None = None) -> Context:
        env = dict(os.environ if env is None else env)
        return cls(env=env, store=StateStore(tpuops_home(env)), project_override=project, assume_yes=assume_yes)

    @property
    def local_root(self) -> Path:
        """Where the local provider keeps its simulated workers and buckets."""
        return self.store.home / "local"

    def provider_for(self, spec: Spec | None = None, state: ClusterState | None = None) -> Provider:
        """The provider of a cluster (built once per Context): from its spec, else from its state. A GCP
        provider's project is the cluster's recorded one, else the spec's, --project, the environment's."""
        name = spec.provider if spec is not None else state.provider if state is not None else "gcp"
        project = None if name == "local" else (state.project if state else None) or self.project_for(spec)
        key = f"provider:{name}:{project or ''}"
        if key not in self._cache:
            if name == "local":
                from tpuops.providers.local import LocalProvider

                self._cache[key] = LocalProvider(self.env, self.local_root)
            else:
                from tpuops.providers.gcp import GcpProvider

                self._cache[key] = GcpProvider(self.env, project, lambda: self.require_project(spec))
        return self._cache[key]  # type: ignore[return-value]

    def local_provider(self) -> Provider:
        """The simulator's provider without a cluster (`tpuops simulate stockout`)."""
        from tpuops.spec import LOCAL_ZONE
        from tpuops.state import ClusterState

        return self.provider_for(None, ClusterState(name="simulator", provider="local", zone=LOCAL_ZONE,
                                                    spec_path=""))

    def gcp_cloud(self, project: str) -> Cloud:
        """Google's clients for a project without a spec (`tpuops catalog --live`)."""
        from tpuops.cloud.gcp import make_cloud as make_gcp_cloud

        return make_gcp_cloud(self.env, project)

    def local_cloud(self) -> Cloud:
        """The simulator's clients without a spec (`tpuops quota --local`)."""
        from tpuops.cloud.local import make_cloud as make_local_cloud

        return make_local_cloud(self.local_root)

    def project_for(self, spec: Spec | None) -> str | None:
        """spec.project, else --project, else CLOUDSDK_CORE_PROJECT / GOOGLE_CLOUD_PROJECT, else gcloud config."""
        if spec is not None and spec.project:
            return spec.project
        return (
            self.project_override
            or self.env.get("CLOUDSDK_CORE_PROJECT")
            or self.env.get("GOOGLE_CLOUD_PROJECT")
            or gcloud_config_project(self.env)
        )

    def require_project(self, spec: Spec | None) -> str:
        project = self.project_for(spec)
        if not project:
            raise UsageError(
                "no GCP project given",
                "set `project:` in the spec, pass --project, or `gcloud config set project ID`",
            )
        return project


def gcloud_config_project(env: Mapping[str, str]) -> str | None:
    """Read gcloud's active configuration file directly (running gcloud costs a second)."""
    config_dir = Path(env.get("CLOUDSDK_CONFIG") or Path(env.get("HOME", str(Path.home()))) / ".config/gcloud")
    try:
        active = (config_dir / "active_config").read_text().strip() or "default"
    except OSError:
        active = "default"
    parser = configparser.ConfigParser()
    try:
        parser.read(config_dir / "configurations" / f"config_{active}")
    except configparser.Error:
        return None
    return parser.get("core", "project", fallback=None)
