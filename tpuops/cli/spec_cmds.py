"""Commands about specs: plan, schema, init."""

from __future__ import annotations

from tpuops.cli.app import app
from tpuops.cli.render import print_json


@app.command()
def schema() -> None:
    """Print the spec's JSON Schema (for editors)."""
    from tpuops.spec import Spec

    print_json(Spec.model_json_schema(by_alias=True))
