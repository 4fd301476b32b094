"""What the simulator's TPUs share, TPU VMs (apis.py) and Compute Engine TPUs (compute_tpus.py): a zone out of
capacity (`tpuops simulate stockout`) refuses both alike; a create is recorded CREATING before its hosts' homes are
made and READY once they are; deleting one ends every process that runs as one of its hosts (found by the HOME the
local runner gives them), as deleting a real TPU would, and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tpuops.atomic import write_atomic
from tpuops.errors import CapacityError, CloudError

STOCKOUTS = "stockouts.json"  # zone -> epoch time until which it has no capacity
Record = Mapping[str, Any]


def workers_dir(root: Path, node: str) -> Path:
    """The hosts' homes of TPU `node`: WORKERS/w<index or rank>."""
    return root / "workers" / node


def stockouts(root: Path) -> dict[str, float]:
    """Zones out of capacity (`tpuops simulate stockout`), each until an epoch time; the past ones dropped."""
    try:
        until = json.loads((root / STOCKOUTS).read_text())
    except FileNotFoundError:
        return {}
    except ValueError as err:
        raise CloudError(f"the simulator's {STOCKOUTS} is unreadable: {err}", "delete it") from err
    return {zone: float(at) for zone, at in until.items() if float(at) > time.time()}


def stock_out(root: Path, zone: str, seconds: float) -> None:
    """`zone` refuses to create TPUs for `seconds` (0: has capacity again at once)."""
    until = stockouts(root)
    until.pop(zone, None)
    if seconds > 0:
        until[zone] = time.time() + seconds
    root.mkdir(parents=True, exist_ok=True)
    write_atomic(root / STOCKOUTS, json.dumps(until, indent=2))


def create_through_creating(root: Path, name: str, zone: str, write: Callable[[Record], None], creating: Record,
                            ready: Record, homes: Iterable[Path]) -> Record:
    """Create TPU `name` in `zone` as Google does: refused while the zone is stocked out (nothing made), else
    recorded as `creating` first (what an interrupted `up` finds again and `down` deletes), its hosts' homes made,
    then recorded as `ready`."""
    until = stockouts(root).get(zone)
    if until is not None:
        raise CapacityError(f"create TPU {name} in {zone}: no capacity: the simulated zone is out of capacity for "
                            f"{max(until - time.time(), 0):.0f}s more (`tpuops simulate stockout`)",
                            "try another zone or --wait-for-capacity")
    write(creating)
    for home in homes:
        home.mkdir(parents=True, exist_ok=True)
    write(ready)
    return ready


def delete_tpu(root: Path, name: str, record: Path) -> None:
    """End the processes of TPU `name`'s hosts, remove their homes, then its record; gone already is no error."""
    home = workers_dir(root, name)
    stop_processes_under(home)
    shutil.rmtree(home, ignore_errors=True)
    record.unlink(missing_ok=True)


def stop_processes_under(home: Path, grace: float = 5.0) -> list[int]:
    """TERM, then KILL, every process whose HOME is inside `home` (what the local runner gives them)."""
    victims = [pid for pid in _pids_with_home_under(home) if pid != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in victims):
            time.sleep(0.05)
    return victims


def _pids_with_home_under(home: Path) -> Iterator[int]:
    prefixes = {f"HOME={home}".encode(), f"HOME={home.resolve()}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for variable in environ.split(b"\0"):
            if any(variable == prefix or variable.startswith(prefix + b"/") for prefix in prefixes):
                yield int(entry.name)
                break


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return (Path("/proc") / str(pid) / "stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False
