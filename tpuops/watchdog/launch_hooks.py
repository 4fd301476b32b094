"""What `launch` does for the watchdog: py-spy on the workers (for the captures) and, with Multislice,
libtpu's own hang detection turned into an exit. Imports nothing of `ops`, which calls it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tpuops.remote.base import Runner, RunResult
from tpuops.remote.fanout import run_each
from tpuops.shipped import script_command
from tpuops.spec import Spec
from tpuops.watchdog.settings import INSTALL_ENV

LIBTPU_ARGS = "LIBTPU_INIT_ARGS"
ABORT_ON_HANGS = "--megascale_abort_on_hangs=true"
HOST_DEFAULTS_ENV = "TPUOPS_HOST_DEFAULTS"  # start.sh: NAME=VALUE settings that fill only what the host lacks


def install_tools(runners: Sequence[Runner], cluster: str, spec: Spec, env: Mapping[str, str],
                  max_parallel: int) -> list[RunResult]:
    """py-spy on every worker, when the watchdog is on: found on PATH, in ~/.local/bin or python3's venv, else
    installed by python3's pip, detached (launch does not wait): into its venv when python3 runs in one (pip
    refuses --user there), else with --user. A failure costs only the stacks, and the capture says why."""
    if not spec.watch.watchdog or env.get(INSTALL_ENV) == "0":
        return []
    argv = script_command("watchdog_tools", cluster)
    return run_each(runners, lambda r: r.run(argv, capture=True, timeout=30), max_parallel)


def with_hang_abort(envs: dict[str, dict[str, str]], user_env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Multislice: LIBTPU_INIT_ARGS=--megascale_abort_on_hangs=true by default, so a hang across slices (which
    libtpu detects after --megascale_graph_hang_threshold) ends the trainer with an error that watch recovers
    from, instead of blocking forever. A value in trainer.env, or in the host's own environment, wins: this is
    only a host default (filled by start.sh where the host has none)."""
    if LIBTPU_ARGS in user_env:
        return envs
    changed = {}
    for worker, env in envs.items():
        if env.get("TPUOPS_NUM_SLICES", "1") == "1":
            changed[worker] = env
            continue
        defaults = " ".join(filter(None, [env.get(HOST_DEFAULTS_ENV, ""), f"{LIBTPU_ARGS}={ABORT_ON_HANGS}"]))
        changed[worker] = {**env, HOST_DEFAULTS_ENV: defaults}
    return changed
