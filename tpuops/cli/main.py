"""Entry point: registers the command modules and turns errors into one line and an exit code."""

from __future__ import annotations

import os
import signal
import sys

import typer

from tpuops.cli.app import app
from tpuops.cli.errors import USAGE_ERROR, render_error, render_usage_error
from tpuops.cli.interrupts import interrupted_exit, signals_interrupt, was_signalled

# Each module registers its commands on `app` when imported (one decorated function per command).
from tpuops.cli import spec_cmds  # noqa: F401,E402  isort: skip
from tpuops.cli import cluster  # noqa: F401,E402  isort: skip
from tpuops.cli import remote  # noqa: F401,E402  isort: skip
from tpuops.cli import logs  # noqa: F401,E402  isort: skip
from tpuops.cli import launch  # noqa: F401,E402  isort: skip
from tpuops.cli import watch  # noqa: F401,E402  isort: skip
from tpuops.cli import autostop  # noqa: F401,E402  isort: skip
from tpuops.cli import catalog  # noqa: F401,E402  isort: skip
from tpuops.cli import quota  # noqa: F401,E402  isort: skip
from tpuops.cli import check  # noqa: F401,E402  isort: skip
from tpuops.cli import guard  # noqa: F401,E402  isort: skip
from tpuops.cli import dashboard  # noqa: F401,E402  isort: skip
from tpuops.cli import files  # noqa: F401,E402  isort: skip
from tpuops.cli import ssh_config  # noqa: F401,E402  isort: skip
from tpuops.cli import tensorboard  # noqa: F401,E402  isort: skip


def main(argv: list[str] | None = None) -> int:
    command = typer.main.get_command(app)
    try:
        # Not standalone: click's usage errors come here and become our one line instead of its 4-line block.
        with signals_interrupt():
            code = command.main(args=argv, prog_name="tpuops", standalone_mode=False)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except USAGE_ERROR as err:
        print(render_usage_error(err), file=sys.stderr)
        return 2
    except typer.Abort:  # a prompt declined, or Ctrl-C (SIGTERM, SIGHUP) where no command handles it
        print("tpuops: interrupted" if was_signalled() else "tpuops: aborted", file=sys.stderr)
        return interrupted_exit() if was_signalled() else 1
    except Exception as err:  # noqa: BLE001  every error becomes one line, traceback on request
        if os.environ.get("TPUOPS_DEBUG") == "1":
            raise
        line, code = render_error(err)
        print(line, file=sys.stderr)
        return code
    if code == 128 + signal.SIGINT and was_signalled():
        return interrupted_exit()  # typer turns an interrupt no command handled into 130, whatever the signal was
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
