"""Run the trainer for a few steps under XLA on this machine's CPU, in a throw-away copy of what `push` sends.

The workspace mirrors a worker: the code (exactly the files `push` would send), the spec's data linked where
the workers would have it (`gs://BUCKET/...` under a local bucket directory, `~/...` under a local home), and
`gs://` and `~/` in the command and `trainer.env` pointed there. The trainer runs in its own process group,
so the timeout (or Ctrl-C) ends it and everything it started.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tpuops.remote.manifest import scan_tree
from tpuops.spec import Spec

TERM_GRACE_SECONDS = 5
TAIL_LINES = 12
HOME_TILDE = re.compile(r"(?<![\w/.~])~/")

# Each framework's switches for XLA on the CPU and a report of every compilation (see compiles.py).
FRAMEWORK_ENV: dict[str, dict[str, str]] = {
    "jax": {"JAX_PLATFORMS": "cpu", "JAX_LOG_COMPILES": "1", "JAX_EXPLAIN_CACHE_MISSES": "1"},
    "pytorch": {"PJRT_DEVICE": "CPU", "PT_XLA_DEBUG_LEVEL": "1"},
    "tensorflow": {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "device_compiler=3"},
}
# What a TPU launch sets and a CPU run must not inherit; CUDA off so a GPU build of a framework stays on the CPU.
CLEARED_ENV = ("TPU_NAME", "XRT_TPU_CONFIG", "TPU_IP_ADDRESS", "TPUOPS_RESUME", "TPUOPS_RESTART")


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def code(self) -> Path:
        return self.root / "code"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def bucket(self) -> Path:
        return self.root / "bucket"

    @property
    def logdir(self) -> Path:
        return self.root / "logs"

    @property
    def lines(self) -> Path:
        """Where the trainer's processes write how many times each line of the code directory ran."""
        return self.root / "lines"

    @property
    def torch_metrics(self) -> Path:
        """Where PyTorch/XLA writes its metrics report at every step end (XLA_METRICS_FILE)."""
        return self.root / "xla-metrics.txt"

    def localize(self, text: str) -> str:
        """gs://B/... -> the local bucket directory, ~/... -> the local home (as on a worker)."""
        return HOME_TILDE.sub(f"{self.home}/", text.replace("gs://", f"{self.bucket}/"))


def prepare_workspace(spec: Spec, spec_dir: Path, root: Path) -> Workspace:
    workspace = Workspace(root)
    source = (spec_dir / spec.code.path).resolve()
    for directory in (workspace.code, workspace.home, workspace.bucket, workspace.logdir, workspace.lines):
        directory.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        shutil.copy2(source, workspace.code / source.name)
    else:
        for entry in scan_tree(source, spec.code.exclude).entries:
            target = workspace.code / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if entry.link is not None:
                target.symlink_to(entry.link)
            else:
                shutil.copy2(source / entry.path, target)
    for item in spec.data:
        _link_data((spec_dir / item.from_).resolve(), item.to, workspace)
    return workspace


def _link_data(source: Path, to: str, workspace: Workspace) -> None:
    """Data is linked, not copied: the trainer reads it where a worker (or the bucket) would have it."""
    if to.startswith("gs://"):
        target = workspace.bucket / to.removeprefix("gs://")
    elif to.startswith("/"):
        return  # an absolute path on the workers: only the command's own paths can tell where it is read
    else:
        target = workspace.home / to.removeprefix("~/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.exists() and not target.exists():
        target.symlink_to(source, target_is_directory=source.is_dir())


def trainer_environment(spec: Spec, workspace: Workspace, steps: int,
                        base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in CLEARED_ENV}
    framework = spec.trainer.framework if spec.trainer else ""
    env.update({key: workspace.localize(value) for key, value in (spec.trainer.env if spec.trainer else {}).items()})
    env.update({key: workspace.localize(value) for key, value in spec.check.env.items()})  # the preflight's own
    env.update({
        "TPUOPS_PREFLIGHT": "1", "TPUOPS_MAX_STEPS": str(steps), "TPUOPS_NUM_WORKERS": "1", "TPUOPS_WORKER_ID": "0",
        "TPUOPS_CLUSTER": spec.name, "TPUOPS_RUN_ID": "preflight", "TPUOPS_LOGDIR": str(workspace.logdir),
        "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
        **FRAMEWORK_ENV.get(framework, {}),
    })
    if framework == "pytorch":
        env["XLA_METRICS_FILE"] = str(workspace.torch_metrics)
    env.pop("TPUOPS_COORDINATOR", None)
    return env


FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)')


@dataclass
class LastTraceback:
    """The frames of the code directory in the last Python traceback the trainer printed: where it failed."""

    code: Path
    frames: list[tuple[str, int]] = field(default_factory=list)  # (path relative to the code directory, line)

    def feed(self, line: str) -> None:
        if line.startswith("Traceback (most recent call last):"):
            self.frames = []
            return
        match = FRAME.match(line)
        if match is None:
            return
        path = Path(match["path"])
        if path.is_relative_to(self.code):
            self.frames.append((path.relative_to(self.code).as_posix(), int(match["line"])))


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None  # None: ended by the timeout
    duration: float
    tail: tuple[str, ...]  # the trainer's own last lines (compilation reports left out)

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None


def run_trainer(command: str, cwd: Path, env: Mapping[str, str], timeout: float,
                on_line: Callable[[str], bool]) -> Outcome:
    """Run `command` with bash in its own process group; `on_line` gets every output line and says whether it
    was a framework report (kept out of the tail). The group is ended on timeout, Ctrl-C or any error."""
    started = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=dict(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            text=True, errors="replace", bufsize=1)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    reader = threading.Thread(target=_read, args=(proc, on_line, tail), name="tpuops-check-output", daemon=True)
    reader.start()
    try:
        code: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        _end_group(proc)
        reader.join(timeout=TERM_GRACE_SECONDS)
    return Outcome(code, time.monotonic() - started, tuple(tail))


def _read(proc: subprocess.Popen, on_line: Callable[[str], bool], tail: deque[str]) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        if not on_line(line) and line.strip():
            tail.append(line)


def _end_group(proc: subprocess.Popen) -> None:
    """TERM the whole group, KILL what is left after a grace period (children included, also after exit)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=TERM_GRACE_SECONDS)
            if sig == signal.SIGTERM and not _group_alive(proc.pid):
                break
        except subprocess.TimeoutExpired:
            continue


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
