"""Counts how often each line of the trainer's own code runs, for `tpuops check` (see tpuops/check/lines.py).

Python imports `sitecustomize` at start-up from the first directory on sys.path that has one, so this file runs
in every Python process the trainer starts whose PYTHONPATH begins with this directory (spawned children and
`python other.py` subprocesses included). With TPUOPS_CHECK_LINES_OUT (a directory) and TPUOPS_CHECK_LINES_ROOT
(the code directory) set, it traces the lines of the files under ROOT and writes `<OUT>/<pid>-<token>.json`,
{"rel/path.py": {"12": 7, ...}}, when the process ends. Then it hands over to the `sitecustomize` Python would
have imported without it.

It runs inside the user's trainer, so: standard library only, nothing printed, every error of its own swallowed
(a count lost is better than a trainer changed), and nothing at all without the two variables. Every Python the
trainer starts reads it, a system python3 too: it runs on 3.7 and later (no syntax past 3.7, nothing evaluated at
import that needs 3.9); 3.6 and 2.7 stop at its first line and say so, as for any sitecustomize they cannot read.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types  # loaded by Python's own start-up already
from collections.abc import Callable

OUT_VARIABLE = "TPUOPS_CHECK_LINES_OUT"
ROOT_VARIABLE = "TPUOPS_CHECK_LINES_ROOT"
FILES_VARIABLE = "TPUOPS_CHECK_LINES_FILES"  # optional: only these files (relative, os.pathsep-separated)
# Last of multiprocessing's exit finalizers: lines the others run still count.
FINALIZE_PRIORITY = -1_000_000
INSTALLED_DIRS = frozenset(("site-packages", "dist-packages"))
_HERE = os.path.dirname(os.path.realpath(__file__))


def _quietly(function: Callable[..., None]) -> Callable[..., None]:
    """Swallow every error of the counter's own: a count lost is better than a trainer changed."""

    def swallowing(*args: object) -> None:
        try:  # noqa: SIM105 (contextlib is not loaded at start-up; this is)
            function(*args)
        except Exception:
            pass

    return swallowing


class _Counter:
    """The counts of one process, per file, and where they go."""

    def __init__(self, root: str, out: str, only: frozenset | None) -> None:
        self.root = root
        self.out = out
        self.only = only  # the files whose lines are wanted (None: every file under root)
        self.files: dict[str, list[int]] = {}  # executions per line number
        self.token = os.urandom(4).hex()
        self.hooked_multiprocessing = False
        self.on_call = self._call_tracer()

    def _call_tracer(self) -> Callable[..., object]:
        # Keyed by file name, not code object: a few hundred files against many thousand code objects, and a
        # cache of code objects would keep every exec'd or generated one alive.
        tracers: dict[str, Callable[..., object] | None] = {}
        decide = self._decide

        def on_call(frame: types.FrameType, event: str, arg: object) -> Callable[..., object] | None:
            # Called on every Python call of every library: one dict lookup on the way back to it.
            try:
                return tracers[frame.f_code.co_filename]
            except KeyError:
                tracer = tracers[frame.f_code.co_filename] = decide(frame.f_code.co_filename)
                return tracer

        return on_call

    def _decide(self, filename: str) -> Callable[..., object] | None:
        try:
            relative = _relative_under(filename, self.root)
            if relative is None or (self.only is not None and relative not in self.only):
                return None
            return _line_tracer(self.files.setdefault(relative, []))
        except Exception:  # a trace function's exception would surface in the trainer and end the tracing
            return None

    @_quietly
    def forget_parent(self) -> None:
        """In a forked child: the parent writes its own counts, the child starts from zero under a new name."""
        for lines in self.files.values():
            lines.clear()
        self.token = os.urandom(4).hex()

    @_quietly
    def before_fork(self) -> None:
        """Hook multiprocessing's fork children once it is loaded (it never is, unless the trainer uses it).

        Its Process children end with os._exit, so atexit never runs there; they run its exit finalizers first,
        but clear the finalizers inherited from the parent, then run its after-fork hooks: the hook registers
        the finalizer in the child. The hook is inherited by every later fork child, hence once per process tree.
        """
        util = sys.modules.get("multiprocessing.util")
        if util is not None and not self.hooked_multiprocessing:
            util.register_after_fork(self, _Counter._finalize_in_child)
            self.hooked_multiprocessing = True

    @_quietly
    def _finalize_in_child(self) -> None:
        sys.modules["multiprocessing.util"].Finalize(None, self.write, exitpriority=FINALIZE_PRIORITY)

    @_quietly
    def write(self) -> None:
        """The counts so far, replacing what this process wrote before (a second exit path writes the total)."""
        snapshot = self._snapshot()
        if not snapshot:
            return  # a process that ran none of the code (a tool, the resource tracker) says nothing
        import json  # not at start-up: the trainer's whole life goes by without it

        os.makedirs(self.out, exist_ok=True)
        final = os.path.join(self.out, f"{os.getpid()}-{self.token}.json")
        temporary = f"{final}.tmp"
        with open(temporary, "w", encoding="utf-8") as stream:
            json.dump(snapshot, stream, separators=(",", ":"))
        os.replace(temporary, final)

    def _snapshot(self) -> dict[str, dict[str, int]]:
        # dict() and list() copy in one step under the GIL: a daemon thread still counting cannot break them.
        files = {relative: list(lines) for relative, lines in dict(self.files).items()}
        counted = {relative: {str(line): count for line, count in enumerate(lines) if count}
                   for relative, lines in files.items()}
        return {relative: lines for relative, lines in counted.items() if lines}


def _line_tracer(lines: list[int]) -> Callable[..., object]:
    # A list indexed by line number, not a dict: a quarter less time per traced line (bench/check_lines.py).
    def on_event(frame: types.FrameType, event: str, arg: object) -> Callable[..., object]:
        if event == "line":
            try:
                lines[frame.f_lineno] += 1
            except IndexError:
                _grow(lines, frame.f_lineno)
                lines[frame.f_lineno] += 1
        return on_event  # itself, or the frame's later lines go untraced

    return on_event


def _grow(lines: list[int], lineno: int) -> None:
    lines.extend([0] * (max(lineno + 1, 2 * len(lines)) - len(lines)))


def _relative_under(filename: str, root: str) -> str | None:
    """`filename`'s path below `root` in posix form, or None when it is elsewhere or not a file (<string>...)."""
    if not filename or filename.startswith("<"):
        return None
    path = os.path.realpath(filename)
    prefix = root.rstrip(os.sep) + os.sep
    if not path.startswith(prefix):
        return None
    relative = path[len(prefix):].replace(os.sep, "/")
    # A virtual environment inside the code directory holds libraries, not the trainer's code: tracing every line
    # of them would slow the run tenfold for counts nobody reads.
    return None if INSTALLED_DIRS.intersection(relative.split("/")) else relative


def _start(root: str, out: str, only: str | None) -> None:
    wanted = None if only is None else frozenset(name for name in only.split(os.pathsep) if name)
    counter = _Counter(os.path.realpath(root), os.path.abspath(out), wanted)
    import atexit
    import threading

    # Registered before anything of the trainer's: atexit runs last-in first-out, so this runs last.
    atexit.register(counter.write)
    os.register_at_fork(before=counter.before_fork, after_in_child=counter.forget_parent)
    threading.settrace(counter.on_call)
    sys.settrace(counter.on_call)


@_quietly
def _install() -> None:
    root = os.environ.get(ROOT_VARIABLE)
    out = os.environ.get(OUT_VARIABLE)
    if root and out:
        _start(root, out, os.environ.get(FILES_VARIABLE))


def _chain() -> None:
    """Import the sitecustomize Python would have found without this directory, as Python would have.

    It then stands as `sitecustomize` in sys.modules (import returns what is there when the module's code ends);
    its errors propagate to `site`, which reports them exactly as it would have, and removes the name.
    """
    path = [entry for entry in sys.path if not _is_here(entry)]
    spec = _find_next(path)
    if spec is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


def _is_here(entry: str) -> bool:
    try:
        return os.path.realpath(entry or os.curdir) == _HERE
    except Exception:
        return False


def _find_next(path: list[str]) -> importlib.machinery.ModuleSpec | None:
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None and not _is_this_file(spec.origin):
            return spec
    return None


def _is_this_file(origin: str | None) -> bool:
    return origin is not None and os.path.dirname(os.path.realpath(origin)) == _HERE


_install()
# Out of sys.path again: the trainer sees the path it would have had (PYTHONPATH still carries it to children).
sys.path[:] = [entry for entry in sys.path if not _is_here(entry)]
_chain()
