"""How many times each line of the trainer's code ran during the preflight run, to confirm or drop the lint's
findings ("this `.item()` ran on every step", "the run never reached this line").

The counting happens inside the trainer's own Python processes: `line_counter/sitecustomize.py`, which Python
loads at start-up from the first directory on PYTHONPATH, writes one JSON file per process that ran any of the
code; `LineCounts.read` sums them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

COUNTER_DIR = Path(__file__).resolve().parent / "line_counter"
# The variables the counter reads (named again in line_counter/sitecustomize.py, which imports nothing of ours).
OUT_VARIABLE = "TPUOPS_CHECK_LINES_OUT"
ROOT_VARIABLE = "TPUOPS_CHECK_LINES_ROOT"
FILES_VARIABLE = "TPUOPS_CHECK_LINES_FILES"

Dump = dict[tuple[str, int], int]


def line_counting_env(code_root: Path, out_dir: Path, pythonpath: str | None,
                      files: Iterable[str] | None = None) -> dict[str, str]:
    """The variables to add to the trainer's environment: PYTHONPATH with the counter first, the two settings
    (absolute: the trainer's processes may start Python from another working directory), and the files to count
    (relative to the code root; None: all of them). Each traced line costs: count only what will be read."""
    entries = [str(COUNTER_DIR)] + ([pythonpath] if pythonpath else [])
    env = {"PYTHONPATH": os.pathsep.join(entries), ROOT_VARIABLE: str(code_root.resolve()),
           OUT_VARIABLE: str(out_dir.resolve())}
    if files is not None:
        env[FILES_VARIABLE] = os.pathsep.join(sorted(files))
    return env


@dataclass(frozen=True)
class LineCounts:
    """Executions per (path relative to the code root, posix; line number), summed over the processes."""

    counts: Mapping[tuple[str, int], int] = field(default_factory=dict)
    processes: int = 0  # dump files read: the processes that ran some of the code and ended through Python
    broken: int = 0  # dump files not readable as counts (the counter writes through a .tmp: a kill leaves that)

    def ran(self, file: str, line: int) -> int:
        return self.counts.get((file, line), 0)

    def ran_file(self, file: str) -> bool:
        """Some line of `file` ran (it was imported, at least)."""
        return file in self._files

    @cached_property
    def _files(self) -> frozenset[str]:
        return frozenset(file for file, _ in self.counts)

    @classmethod
    def read(cls, out_dir: Path) -> LineCounts:
        dumps = [_read_dump(path) for path in sorted(out_dir.glob("*.json"))] if out_dir.is_dir() else []
        readable = [dump for dump in dumps if dump is not None]
        return cls(counts=_summed(readable), processes=len(readable), broken=len(dumps) - len(readable))


def _read_dump(path: Path) -> Dump | None:
    """One process's counts, or None for a file that is not what the counter writes."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {(file, int(line)): _count(count) for file, lines in raw.items() for line, count in lines.items()}
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError):
        return None


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


def _summed(dumps: Iterable[Dump]) -> dict[tuple[str, int], int]:
    total: dict[tuple[str, int], int] = {}
    for dump in dumps:
        for key, count in dump.items():
            total[key] = total.get(key, 0) + count
    return total
