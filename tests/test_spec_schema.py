"""The spec's JSON Schema as editors read it: every key described, and `init` pointing the spec at it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers import run_cli
from tpuops.ops.specs import spec_schema


def properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of the root and of each definition, named `Model.key`."""
    for owner, node in [("Spec", schema), *schema.get("$defs", {}).items()]:
        for key, prop in node.get("properties", {}).items():
            yield f"{owner}.{key}", prop


def test_every_key_of_the_schema_has_a_description() -> None:
    schema = spec_schema()
    found = dict(properties(schema))
    assert len(found) >= 55 and "TpuSpec.type" in found and "GuardSpec.notify" in found
    undescribed = [name for name, prop in found.items() if not str(prop.get("description", "")).strip()]
    assert undescribed == [], f"give these keys a Field(description=...): {undescribed}"


def test_the_description_check_sees_a_missing_one() -> None:
    schema = spec_schema()
    del schema["$defs"]["SshSpec"]["properties"]["port"]["description"]
    assert [name for name, prop in properties(schema) if "description" not in prop] == ["SshSpec.port"]


def test_init_writes_the_schema_beside_the_spec_and_names_it_relatively(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    result = run_cli("init", "--template", "local", "project/spec.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    spec = tmp_path / "project" / "spec.yaml"
    assert spec.read_text().splitlines()[0] == "# yaml-language-server: $schema=tpuops.schema.json"
    written = json.loads((tmp_path / "project" / "tpuops.schema.json").read_text())
    assert written == json.loads(run_cli("schema").stdout) == spec_schema()
    assert not (tmp_path / "tpuops.schema.json").exists()  # beside the spec, not in the working directory
    assert run_cli("plan", "project/spec.yaml", cwd=tmp_path).returncode == 0  # the line is only a comment
