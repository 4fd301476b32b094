"""The line counter in real Python processes: trainers written to a temporary code directory, run with
sys.executable and the environment `line_counting_env` gives, their counts read back with `LineCounts.read`; and
the same trainers without the counter, whose exit code and output must not differ."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tpuops.check.lines import COUNTER_DIR, LineCounts, line_counting_env

TIMEOUT = 60


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    counts: LineCounts


def write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def python(code: Path, env: dict[str, str], script: str = "train.py") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, script], cwd=code, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def base_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}


def counted(tmp_path: Path, files: dict[str, str], pythonpath: str | None = None) -> Run:
    code, out = tmp_path / "code", tmp_path / "lines"
    write(code, files)
    done = python(code, {**base_env(), **line_counting_env(code, out, pythonpath)})
    return Run(done.returncode, done.stdout, done.stderr, LineCounts.read(out))


def uncounted(tmp_path: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    """The same trainer (already written by `counted`) as Python runs it without the counter."""
    return python(tmp_path / "code", {**base_env(), **({"PYTHONPATH": pythonpath} if pythonpath else {})})


def line_of(source: str, marker: str) -> int:
    lines = textwrap.dedent(source).splitlines()
    return next(number for number, text in enumerate(lines, 1) if marker in text)


LOOP = """\
    total = 0
    for step in range(7):  # the loop
        total += step  # the body
    print(total)
"""


def test_a_loop_body_counts_its_iterations_and_the_for_line_one_more(tmp_path: Path) -> None:
    run = counted(tmp_path, {"train.py": LOOP})
    assert (run.code, run.stdout) == (0, "21\n")
    assert run.counts.ran("train.py", line_of(LOOP, "# the body")) == 7
    assert run.counts.ran("train.py", line_of(LOOP, "# the loop")) == 8
    assert run.counts.ran("train.py", 1) == 1
    assert (run.counts.processes, run.counts.broken) == (1, 0)


SUBPACKAGE = """\
    def step(x):
        return x * 2  # the step
"""


def test_a_module_of_a_subpackage_is_counted_under_its_relative_path(tmp_path: Path) -> None:
    run = counted(tmp_path, {
        "train.py": "from models.blocks.mlp import step\nfor i in range(3):\n    step(i)\n",
        "models/__init__.py": "", "models/blocks/__init__.py": "", "models/blocks/mlp.py": SUBPACKAGE,
    })
    assert run.code == 0, run.stderr
    assert run.counts.ran("models/blocks/mlp.py", line_of(SUBPACKAGE, "# the step")) == 3
    assert run.counts.ran("train.py", 3) == 3


def test_only_the_files_asked_for_are_counted(tmp_path: Path) -> None:
    code, out = tmp_path / "code", tmp_path / "lines"
    write(code, {"train.py": "from models.blocks.mlp import step\nfor i in range(3):\n    step(i)\n",
                 "models/__init__.py": "", "models/blocks/__init__.py": "", "models/blocks/mlp.py": SUBPACKAGE})
    done = python(code, {**base_env(), **line_counting_env(code, out, None, ["models/blocks/mlp.py"])})
    assert done.returncode == 0, done.stderr
    counts = LineCounts.read(out)
    assert {file for file, _ in counts.counts} == {"models/blocks/mlp.py"}
    assert counts.ran("models/blocks/mlp.py", line_of(SUBPACKAGE, "# the step")) == 3


def test_the_standard_library_and_site_packages_are_not_counted(tmp_path: Path) -> None:
    run = counted(tmp_path, {"train.py": "import json, email.parser, yaml\n"
                                         "print(json.dumps(yaml.safe_load('a: [1, 2]')))\n"})
    assert (run.code, run.stdout) == (0, '{"a": [1, 2]}\n'), run.stderr
    assert {file for file, _ in run.counts.counts} == {"train.py"}


def test_a_virtual_environment_inside_the_code_directory_is_not_counted(tmp_path: Path) -> None:
    run = counted(tmp_path, {
        "train.py": "import sys\nsys.path.insert(0, '.venv/lib/python3/site-packages')\nimport vendored\n"
                    "vendored.work()\n",
        ".venv/lib/python3/site-packages/vendored.py": "def work():\n    return 1\n",
    })
    assert run.code == 0, run.stderr
    assert {file for file, _ in run.counts.counts} == {"train.py"}
    assert run.counts.ran("train.py", 4) == 1


THREADED = """\
    import threading

    def work(n):
        for _ in range(n):
            pass  # in the thread

    thread = threading.Thread(target=work, args=(5,))
    thread.start()
    thread.join()
"""


def test_a_function_run_in_a_thread_is_counted(tmp_path: Path) -> None:
    run = counted(tmp_path, {"train.py": THREADED})
    assert run.code == 0, run.stderr
    assert run.counts.ran("train.py", line_of(THREADED, "# in the thread")) == 5


CHILDREN = """\
    import multiprocessing
    import sys

    def work(n):
        for _ in range(n):
            pass  # in a child

    if __name__ == "__main__":
        context = multiprocessing.get_context(sys.argv[1] if len(sys.argv) > 1 else "{method}")
        children = [context.Process(target=work, args=(n,)) for n in (2, 3)]
        for child in children:
            child.start()
        for child in children:
            child.join()
        print([child.exitcode for child in children])
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_children_are_counted_and_summed(tmp_path: Path, method: str) -> None:
    source = CHILDREN.replace("{method}", method)
    run = counted(tmp_path, {"train.py": source})
    assert (run.code, run.stdout) == (0, "[0, 0]\n"), run.stderr
    assert run.counts.ran("train.py", line_of(source, "# in a child")) == 5
    assert run.counts.processes == 3  # the trainer and its two children (the resource tracker, forkserver: none)
    # Each child's counts start at its own beginning: the parent's lines are not counted again in a fork child.
    assert run.counts.ran("train.py", line_of(source, "context = ")) == 1


POOL = """\
    import concurrent.futures
    import multiprocessing

    def square(n):
        return n * n  # in a worker

    if __name__ == "__main__":
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
            print(sum(pool.map(square, range(6))))
"""


def test_process_pool_workers_are_counted(tmp_path: Path) -> None:
    """How torch_xla's xmp.spawn starts its processes (a ProcessPoolExecutor; fork when asked for)."""
    run = counted(tmp_path, {"train.py": POOL})
    assert (run.code, run.stdout) == (0, "55\n"), run.stderr
    assert run.counts.ran("train.py", line_of(POOL, "# in a worker")) == 6


FORKED = """\
    import os
    import sys

    pid = os.fork()
    if pid == 0:
        print("child")  # in the child
        sys.exit(0)
    os.waitpid(pid, 0)
    print("parent")
"""


def test_a_plain_fork_child_that_exits_through_python_is_counted(tmp_path: Path) -> None:
    run = counted(tmp_path, {"train.py": FORKED})
    assert run.code == 0, run.stderr
    assert run.counts.ran("train.py", line_of(FORKED, "# in the child")) == 1
    assert run.counts.ran("train.py", line_of(FORKED, 'print("parent")')) == 1
    assert run.counts.processes == 2


RAISES = """\
    for step in range(3):
        print(step)  # a step
    raise RuntimeError("the trainer failed")
"""


def test_a_trainer_that_raises_still_dumps_and_fails_as_it_would(tmp_path: Path) -> None:
    run = counted(tmp_path, {"train.py": RAISES})
    alone = uncounted(tmp_path)
    assert alone.returncode == 1 and "RuntimeError: the trainer failed" in alone.stderr
    assert (run.code, run.stdout, run.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    assert run.counts.ran("train.py", line_of(RAISES, "# a step")) == 3


INTERRUPTED = """\
    import multiprocessing
    import pathlib
    import time

    def spin(ready):
        ready.set()
        while True:
            time.sleep(0.01)  # in the child

    if __name__ == "__main__":
        context = multiprocessing.get_context("spawn")
        ready = context.Event()
        context.Process(target=spin, args=(ready,)).start()
        ready.wait(30)
        pathlib.Path("ready").write_text("")
        while True:
            time.sleep(0.01)  # in the parent
"""


def _sigint_by_default() -> None:
    """A test run in the background of a shell without job control inherits SIGINT ignored, and so would the
    trainer, whose Python then never raises KeyboardInterrupt: the trainer a preflight starts has it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_trainer_interrupted_in_its_process_group_still_dumps_with_its_children(tmp_path: Path) -> None:
    """What a preflight's timeout could send first: SIGINT ends every process through Python (SIGTERM would not)."""
    code, out = tmp_path / "code", tmp_path / "lines"
    write(code, {"train.py": INTERRUPTED})
    env = {**base_env(), **line_counting_env(code, out, None)}
    proc = subprocess.Popen([sys.executable, "train.py"], cwd=code, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_sigint_by_default)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (code / "ready").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (code / "ready").exists()
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=TIMEOUT) != 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=TIMEOUT)
    counts = LineCounts.read(out)
    assert counts.ran("train.py", line_of(INTERRUPTED, "# in the parent")) > 0
    assert counts.ran("train.py", line_of(INTERRUPTED, "# in the child")) > 0
    assert counts.processes == 2


REPORTS = """\
    import sys
    import sitecustomize

    print(sys.path[1:])
    print(sitecustomize.__file__)
"""


def test_a_sitecustomize_later_on_the_path_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    write(theirs, {"sitecustomize.py": "print('their sitecustomize ran')\n"})
    run = counted(tmp_path, {"train.py": REPORTS}, pythonpath=str(theirs))
    alone = uncounted(tmp_path, pythonpath=str(theirs))
    assert alone.stdout.startswith("their sitecustomize ran\n")
    # The trainer sees the path, and the sitecustomize module, it would have seen without the counter.
    assert (run.code, run.stdout, run.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    assert run.counts.processes == 1


def test_a_broken_sitecustomize_later_on_the_path_fails_as_it_would(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    write(theirs, {"sitecustomize.py": "raise ValueError('their sitecustomize is broken')\n"})
    run = counted(tmp_path, {"train.py": LOOP}, pythonpath=str(theirs))
    alone = uncounted(tmp_path, pythonpath=str(theirs))
    assert "ValueError: their sitecustomize is broken" in alone.stderr
    assert (run.code, run.stdout, run.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    assert run.counts.ran("train.py", line_of(LOOP, "# the body")) == 7


EXITS = """\
    import sys

    print("to stdout")
    print("to stderr", file=sys.stderr)
    sys.exit(3)
"""


def test_an_unwritable_output_directory_changes_nothing(tmp_path: Path) -> None:
    code = tmp_path / "code"
    write(code, {"train.py": EXITS})
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")
    counted_run = python(code, {**base_env(), **line_counting_env(code, not_a_directory / "lines", None)})
    alone = uncounted(tmp_path)
    assert alone.returncode == 3
    assert (counted_run.returncode, counted_run.stdout, counted_run.stderr) == (3, alone.stdout, alone.stderr)


TRACING = """\
    import sys
    import threading

    print(sys.gettrace(), threading.gettrace())
"""


@pytest.mark.parametrize("unset", [("TPUOPS_CHECK_LINES_OUT", "TPUOPS_CHECK_LINES_ROOT"),
                                   ("TPUOPS_CHECK_LINES_ROOT",)])
def test_without_the_variables_nothing_is_traced_nor_written(tmp_path: Path, unset: tuple[str, ...]) -> None:
    code, out = tmp_path / "code", tmp_path / "lines"
    write(code, {"train.py": TRACING})
    env = {**base_env(), **line_counting_env(code, out, None)}
    done = python(code, {key: value for key, value in env.items() if key not in unset})
    assert (done.returncode, done.stdout, done.stderr) == (0, "None None\n", "")
    assert not out.exists()


def test_the_counter_imports_only_the_standard_library_and_parses_as_python_3_7() -> None:
    """Every Python the trainer starts loads it, also an older one than tpuops needs (a system python3)."""
    tree = ast.parse((COUNTER_DIR / "sitecustomize.py").read_text(), feature_version=(3, 7))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and {name.split(".")[0] for name in imported} <= set(sys.stdlib_module_names) | {"__future__"}


def test_the_environment_puts_the_counter_first_and_keeps_the_path_given(tmp_path: Path) -> None:
    env = line_counting_env(tmp_path / "code", tmp_path / "out", "/a:/b")
    assert env["PYTHONPATH"] == f"{COUNTER_DIR}:/a:/b"
    assert line_counting_env(tmp_path, tmp_path, None)["PYTHONPATH"] == str(COUNTER_DIR)
    assert (env["TPUOPS_CHECK_LINES_ROOT"], env["TPUOPS_CHECK_LINES_OUT"]) == (
        str(tmp_path / "code"), str(tmp_path / "out"))


def test_reading_sums_the_dumps_and_counts_the_broken_ones(tmp_path: Path) -> None:
    (tmp_path / "1-a.json").write_text(json.dumps({"train.py": {"3": 2, "4": 1}}))
    (tmp_path / "2-b.json").write_text(json.dumps({"train.py": {"3": 5}, "m/x.py": {"1": 1}}))
    (tmp_path / "3-c.json").write_text('{"train.py": {"3": ')  # cut short
    (tmp_path / "4-d.json").write_text(json.dumps({"train.py": {"3": "many"}}))
    (tmp_path / "5-e.json").write_text(json.dumps(["not", "counts"]))
    (tmp_path / "6-f.json.tmp").write_text(json.dumps({"train.py": {"3": 100}}))  # a write never finished
    counts = LineCounts.read(tmp_path)
    assert (counts.ran("train.py", 3), counts.ran("train.py", 4), counts.ran("m/x.py", 1)) == (7, 1, 1)
    assert counts.ran("train.py", 99) == 0
    assert (counts.processes, counts.broken) == (2, 3)
    assert LineCounts.read(tmp_path / "missing") == LineCounts()
