"""The Typer application every command module registers on, and the options they share."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="tpuops",
    help="One spec and a handful of commands for training on Google Cloud TPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

JSON_OPTION = typer.Option(False, "--json", help="Machine-readable output.")
YES_OPTION = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")
PROJECT_OPTION = typer.Option(None, "--project", help="GCP project (else spec, CLOUDSDK_CORE_PROJECT, ...).")


@app.callback()
def _root() -> None:
    """tpuops: one spec and a handful of commands for training on Google Cloud TPUs."""
