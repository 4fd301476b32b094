"""The Typer application every command module registers on, and the options they share."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from tpuops import __version__

# `tpuops --help` lists the commands in the order of the workflow; a new command is one more name here
# (commands missing from the list follow, alphabetically).
COMMAND_ORDER = (
    "init", "plan", "catalog", "quota", "check", "up", "status", "push", "pull", "exec", "ssh", "ssh-config",
    "launch", "logs", "tensorboard", "watch", "guard", "autostop", "dashboard", "stop", "down", "run", "simulate",
    "schema",
)


class WorkflowOrderGroup(TyperGroup):
    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        names = super().list_commands(ctx)
        rank = {name: index for index, name in enumerate(COMMAND_ORDER)}
        return sorted(names, key=lambda name: (rank.get(name, len(rank)), name))


app = typer.Typer(
    name="tpuops",
    cls=WorkflowOrderGroup,
    help="One spec and a handful of commands for training on Google Cloud TPUs.",
    epilog="Start with `tpuops init` and `tpuops plan tpuops.yaml`; `tpuops COMMAND -h` shows each command's "
    "options and an example.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def complete_cluster(incomplete: str) -> list[str]:
    """Cluster names with local state (shell completion)."""
    from tpuops.state import StateStore, tpuops_home

    return [name for name in StateStore(tpuops_home()).names() if name.startswith(incomplete)]


def complete_spec(incomplete: str) -> list[str]:
    """YAML files and directories under what was typed (shell completion for SPEC arguments)."""
    from pathlib import Path

    folder, _, stem = incomplete.rpartition("/")
    base = Path(folder or ".")
    if not base.is_dir():
        return []
    found = []
    for entry in sorted(base.iterdir()):
        if entry.name.startswith(stem) and (entry.is_dir() or entry.suffix in (".yaml", ".yml")):
            text = f"{folder}/{entry.name}" if folder else entry.name
            found.append(text + "/" if entry.is_dir() else text)
    return found


JSON_OPTION = typer.Option(False, "--json", help="Machine-readable output (one JSON document).")
YES_OPTION = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")
PROJECT_OPTION = typer.Option(None, "--project", metavar="PROJECT",
                              help="GCP project where the spec names none (the spec's project wins; then "
                                   "CLOUDSDK_CORE_PROJECT, GOOGLE_CLOUD_PROJECT, gcloud's config).")
SPEC_ARGUMENT = typer.Argument(..., metavar="SPEC", help="The spec file.", autocompletion=complete_spec)
CLUSTER_ARGUMENT = typer.Argument(None, metavar="NAME", help="Cluster name (default: the only cluster).",
                                  autocompletion=complete_cluster)


def _print_version(value: bool) -> None:
    if value:
        print(f"tpuops {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_print_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """tpuops: one spec and a handful of commands for training on Google Cloud TPUs."""
