"""Entry point: registers the command modules and turns errors into one line and an exit code."""

from __future__ import annotations

import os
import sys

import click
import typer

from tpuops.cli.app import app
from tpuops.cli.errors import render_error

# Each module registers its commands on `app` when imported (one decorated function per command).
from tpuops.cli import spec_cmds  # noqa: F401,E402  isort: skip


def main(argv: list[str] | None = None) -> int:
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="tpuops", standalone_mode=False)
    except click.exceptions.Exit as exit_:
        return exit_.exit_code
    except click.ClickException as err:
        err.show()
        return err.exit_code
    except (click.Abort, KeyboardInterrupt):
        print("tpuops: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001  every error becomes one line, traceback on request
        if os.environ.get("TPUOPS_DEBUG") == "1":
            raise
        line, code = render_error(err)
        print(line, file=sys.stderr)
        return code
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
