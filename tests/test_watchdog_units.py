"""The hang watchdog's judgement, piece by piece: the step series and its threshold (a slow trainer, a long first
compile, a checkpoint being written), the restart policy, the classification of probes, the spec's `watch:`
section, the scalar source on real event files, and the host scripts that find py-spy and read output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import write_spec
from tests.logs_writers import TbWriter, event_file_name
from tests.venvs import make_venv, script_wheel
from tpuops.cloud.blobs import DirBlobStore
from tpuops.errors import SpecError
from tpuops.logs.runs import Launch, choose
from tpuops.remote.local import LocalRunner
from tpuops.shipped import script_command
from tpuops.spec import load_spec
from tpuops.watchdog.capture import WorkerCapture, capture_all, stack_signature, without_python_stacks
from tpuops.watchdog.confirm import classify, odd_by_stacks, parse_probe
from tpuops.watchdog.launch_hooks import ABORT_ON_HANGS, with_hang_abort
from tpuops.watchdog.policy import decide
from tpuops.watchdog.progress import OutputProgress, ScalarProgress, StepSeries
from tpuops.watchdog.records import Incident
from tpuops.watchdog.settings import WatchdogSettings

FAST = WatchdogSettings(min_hang=2.0, max_hang=60.0, factor=10.0, min_gaps=3)


def feed(series: StepSeries, steps: list[tuple[int, float]]) -> None:
    """Steps as the scalars give them: (step, writer time), each seen by the watchdog at its writer time."""
    for step, at in steps:
        series.add_points([(step, at)], now=at)


def never_suspected(series: StepSeries, start: float, end: float, settings: WatchdogSettings = FAST) -> bool:
    return not any(series.suspect(settings, start + i * 0.25) for i in range(int((end - start) / 0.25)))


# ------------------------------------------------------------------------------------------ step series


def test_a_merely_slow_trainer_is_never_called_hung() -> None:
    series = StepSeries()
    feed(series, [(step, float(step)) for step in range(1, 21)])  # a median gap of 1 s: T = 10 s
    assert series.threshold(FAST) == 10.0
    slow = [(20 + i, 20.0 + 3 * i) for i in range(1, 20)]  # then a step every 3 s
    for step, at in slow:
        assert never_suspected(series, at - 3.0, at), f"called hung before step {step}"
        series.add_points([(step, at)], now=at)
    assert series.suspect(FAST, slow[-1][1] + series.threshold(FAST) + 0.5)  # but a real stop is seen


def test_a_long_first_compile_is_never_called_hung() -> None:
    series = StepSeries()
    assert never_suspected(series, 0.0, 5000.0)  # an hour and more without a first step
    series.add_points([(1, 5000.0)], now=5000.0)
    assert not series.suspect(FAST, 5000.0 + 59)  # one step tells nothing of the pace: T = max_hang
    assert series.suspect(FAST, 5000.0 + 61)


def test_a_checkpoint_being_written_stretches_the_clock_and_hang_after_is_used_as_given() -> None:
    series = StepSeries()
    feed(series, [(step, float(step)) for step in range(1, 11)])  # T = 10 s
    series.saw_checkpoint(15.0)
    series.saw_checkpoint(22.0)
    assert not series.suspect(FAST, 31.0)  # 21 s since the last step, 9 since the checkpoint files changed
    assert series.suspect(FAST, 32.5)
    given = WatchdogSettings(hang_after=100.0)
    assert series.threshold(given) == 100.0 and not series.suspect(given, 110.0)


def test_output_steps_are_read_across_partial_lines_and_spread_over_the_poll() -> None:
    source = OutputProgress(r"(?i)\bstep\b\D{0,3}?(\d+)", "c", "r")
    assert source.steps_in(b"compiling...\nStep: 1 loss 3.2\nstep=2 lo") == [(1, None)]
    assert source.steps_in(b"ss 3.1\nsteps 99 are planned\ntrain step #3\n") == [(2, None), (3, None)]
    series = StepSeries()
    series.add_points([(1, None)], now=100.0)
    series.add_points([(2, None), (3, None), (4, None), (5, None)], now=102.0)  # 4 steps in 2 s
    assert list(series.gaps) == [0.5] * 4


def test_an_earlier_runs_higher_steps_are_not_this_runs_progress(tmp_path: Path) -> None:
    """The same logdir, a run before this one that got to step 99,000: counted, they would be this run's last
    step, none of its own steps would ever be "fresh", and the watchdog would call a training run hung."""
    earlier = TbWriter(tmp_path)
    earlier.scalars(range(0, 99_001, 33_000))
    earlier.close()
    earlier.path.rename(tmp_path / event_file_name(0))  # written in 2023
    now = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() - 60))
    runs = choose([Launch("20231114-220000-0a0a", 0), Launch(f"{now}-0b0b", 0)], None, "c")  # watching the 2nd
    source = ScalarProgress(DirBlobStore(tmp_path), warn=print, label=runs.label)
    current = TbWriter(tmp_path)
    current.scalars(range(1, 4))
    points, _ = source.poll()
    assert [step for step, _ in points] == [1, 2, 3]
    series = StepSeries(started_at=time.time())
    assert series.add_points(points, time.time()) and series.last_step == 3
    current.close()


def test_scalar_source_reads_steps_incrementally_and_sees_checkpoint_files(tmp_path: Path) -> None:
    writer = TbWriter(tmp_path)
    source = ScalarProgress(DirBlobStore(tmp_path), warn=print)
    writer.scalars(range(1, 4))
    points, writing = source.poll()
    assert [step for step, _ in points] == [1, 2, 3] and not writing
    read = source.tail.total_bytes_read
    (tmp_path / ".tpuops" / "c").mkdir(parents=True)  # the watchdog's own records, with a logdir at the bucket root
    (tmp_path / ".tpuops" / "c" / "watchdog.json").write_text("{}")
    assert source.poll() == ([], False)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "state.bin").write_bytes(b"x" * 100)
    points, writing = source.poll()
    assert points == [] and writing and source.tail.total_bytes_read == read  # nothing read again
    writer.scalars(range(4, 5))
    points, writing = source.poll()
    assert [step for step, _ in points] == [4] and not writing
    writer.close()


# ------------------------------------------------------------------------------------------- policy


def incident(at: str, odd: str | None, action: str) -> Incident:
    return Incident(at, "run", "stall", odd, 5, 10.0, 5.0, action, "")


NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def test_policy_restarts_twice_an_hour_recreates_for_the_same_odd_worker_then_stops() -> None:
    def act(history: list[Incident], odd: str | None) -> str:
        return decide(history, odd, NOW, restarts_per_window=2, window=3600).action

    assert act([], "w1") == "restart"
    assert act([incident("2027-01-15T07:30:00+00:00", "w0", "restart")], "w1") == "restart"
    assert act([incident("2027-01-15T07:30:00+00:00", "w1", "restart")], "w1") == "recreate"
    two = [incident("2027-01-15T07:30:00+00:00", "w0", "restart"), incident("2027-01-15T07:40:00+00:00", None,
                                                                             "restart")]
    assert act(two, "w2") == "stop"  # the third hang within the hour
    assert act([incident("2027-01-15T07:50:00+00:00", "w1", "recreate")], "w0") == "stop"
    old = [incident("2027-01-15T06:00:00+00:00", "w1", "restart"), incident("2027-01-15T06:10:00+00:00", "w1",
                                                                            "recreate")]
    assert act(old, "w1") == "restart"  # more than an hour ago: forgotten


# ------------------------------------------------------------------------------------------- classify


def probe(worker: str, state: str = "running", metrics: dict | None = None) -> object:
    lines = [f"state {state}"] + (["proc 12 S do_wait python3 train.py"] if state == "running" else [])
    lines.append(f"metrics {json.dumps(metrics)}" if metrics else "metrics-unavailable no libtpu metrics server")
    return parse_probe(worker, True, "\n".join(lines).encode(), None)


def core(pc: int, queued: int = 1, fingerprint: str = "aa") -> dict:
    return {"cores": [{"core": 0, "sequencers": [[7, pc]], "queued": queued, "fingerprint": fingerprint}],
            "duty_cycle_pct": [50.0], "hlo_queue_size": [queued]}


def test_classify_the_kinds_of_hang_and_the_odd_worker() -> None:
    gone = classify([probe("w0"), probe("w1")], [probe("w0"), probe("w1", "lost")])
    assert (gone.kind, gone.odd_worker) == ("worker-gone", "w1")

    blind = classify([probe("w0"), probe("w1")], [probe("w0"), probe("w1")])
    assert blind.kind == "stall" and "no libtpu metrics" in blind.metrics_note

    first = [probe("w0", metrics=core(5)), probe("w1", metrics=core(9, fingerprint="bb")), probe("w2", metrics=core(5))]
    second = [probe("w0", metrics=core(5)), probe("w1", metrics=core(9, fingerprint="bb")),
              probe("w2", metrics=core(5))]
    device = classify(first, second)
    assert (device.kind, device.odd_worker) == ("device-hang", "w1")  # the one running another program

    idle = {"cores": [], "duty_cycle_pct": [0.0, 0.0], "hlo_queue_size": [0, 0]}
    host = classify([probe("w0", metrics=idle), probe("w1", metrics=idle)],
                    [probe("w0", metrics=idle), probe("w1", metrics=idle)])
    assert host.kind == "host-stall"

    moving = classify([probe("w0", metrics=core(5))], [probe("w0", metrics=core(6))])
    assert moving.kind == "stall"


# ----------------------------------------------------------------------------------------------- spec


# `py-spy dump` of a trainer (0.4, Python 3.11) as watchdog_capture.sh frames it; recorded from real processes. A
# process that never imported `threading` gets no thread name; one that did gets "MainThread" and its own threads.
WAITING_NO_THREADING = """\
--- pid 1588: /work/venv/bin/python train.py same plain
Process 1588: /work/venv/bin/python train.py same plain
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 1588 (idle)
    wait_for_peers (train.py:14)
    train_step (train.py:18)
    <module> (train.py:21)
"""
STUCK_NO_THREADING = """\
--- pid 1652: /work/venv/bin/python train.py odd plain
Process 1652: /work/venv/bin/python train.py odd plain
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 1652 (idle)
    stuck_reading_data (train.py:10)
    train_step (train.py:18)
    <module> (train.py:21)
"""
WAITING_WITH_THREADS = """\
--- pid 1700: /work/venv/bin/python train.py same threads
Process 1700: /work/venv/bin/python train.py same threads
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 1700 (idle): "MainThread"
    wait_for_peers (train.py:14)
    train_step (train.py:18)
    <module> (train.py:21)
Thread 1719 (idle): "prefetch"
    <lambda> (train.py:6)
    Thread.run (threading.py:982)
    Thread._bootstrap_inner (threading.py:1045)
    Thread._bootstrap (threading.py:1002)
"""
STUCK_WITH_THREADS = """\
--- pid 1732: /work/venv/bin/python train.py odd threads
Process 1732: /work/venv/bin/python train.py odd threads
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 1732 (idle): "MainThread"
    stuck_reading_data (train.py:10)
    train_step (train.py:18)
    <module> (train.py:21)
Thread 1734 (idle): "prefetch"
    <lambda> (train.py:6)
    Thread.run (threading.py:982)
    Thread._bootstrap_inner (threading.py:1045)
    Thread._bootstrap (threading.py:1002)
"""


def another_worker(dump: str, pid: int, other: int) -> str:
    """The same dump as a process of another worker would give it (another pid)."""
    return dump.replace(str(pid), str(other))


@pytest.mark.parametrize(("waiting", "stuck", "pid"), [(WAITING_NO_THREADING, STUCK_NO_THREADING, 1588),
                                                      (WAITING_WITH_THREADS, STUCK_WITH_THREADS, 1700)])
def test_the_odd_worker_is_found_by_its_main_thread_with_or_without_thread_names(waiting: str, stuck: str,
                                                                                  pid: int) -> None:
    assert stack_signature(waiting).splitlines() == [
        "wait_for_peers (train.py:14)", "train_step (train.py:18)", "<module> (train.py:21)"]
    stacks = {"w0": waiting, "w1": stuck, "w2": another_worker(waiting, pid, 2211)}
    assert odd_by_stacks(stacks, stack_signature) == "w1"


def test_the_main_thread_is_known_by_its_id_wherever_py_spy_lists_it() -> None:
    main, prefetch = WAITING_WITH_THREADS.split('Thread 1719 (idle): "prefetch"\n')
    head, main_thread = main.split("\n\n")
    unnamed = main_thread.replace(': "MainThread"', "")
    reordered = f"{head}\n\nThread 1719 (idle)\n{prefetch}{unnamed}"  # no names, the main thread listed last
    assert stack_signature(reordered) == stack_signature(WAITING_WITH_THREADS) == stack_signature(WAITING_NO_THREADING)


def test_workers_whose_stacks_say_nothing_name_no_odd_worker() -> None:
    """py-spy failed on two workers: the third is not odd for having stacks."""
    nothing = "--- pid 40: python3 train.py\nstate S (sleeping)\n"
    assert odd_by_stacks({"w0": nothing, "w1": STUCK_NO_THREADING, "w2": nothing}, stack_signature) is None


def test_spec_watch_section(tmp_path: Path) -> None:
    base = "name: c\nprovider: local\ntpu: {type: v2-8}\n"
    spec = load_spec(write_spec(tmp_path, base + 'watch: {progress: "it (\\\\d+)/", hang_after: 20m}\n'))
    assert spec.watch.progress == r"it (\d+)/" and spec.watch.hang_after == 1200.0 and spec.watch.watchdog
    assert load_spec(write_spec(tmp_path, base + "watch: {hang_after: 900}\n")).watch.hang_after == 900.0
    settings = WatchdogSettings.from_spec(spec.watch, {"TPUOPS_WATCHDOG_MIN_HANG": "2", "TPUOPS_WATCHDOG": "0"})
    assert (settings.progress, settings.hang_after, settings.min_hang, settings.enabled) == \
        (r"it (\d+)/", 1200.0, 2.0, False)
    for bad, message in (('watch: {progress: "step \\\\d+"}', "needs a group"),
                         ('watch: {progress: "step (("}', "bad regular expression"),
                         ("watch: {hang_after: soon}", "cannot read"),
                         ("watch: {hang_after: 10}", "hang_after 10 has no unit .* write 10m for 10 minutes"),
                         ('watch: {watchdog: "yes"}', "watch.watchdog"),
                         ("watch: {hang: 5m}", "unknown key 'hang'")):
        with pytest.raises(SpecError, match=message):
            load_spec(write_spec(tmp_path, base + bad + "\n"))


# -------------------------------------------------------------------------------------------- launch


def test_multislice_hosts_get_megascale_abort_on_hangs_unless_the_trainer_env_sets_libtpu_args() -> None:
    envs = {"s0w0": {"TPUOPS_NUM_SLICES": "2", "TPUOPS_HOST_DEFAULTS": "MEGASCALE_PORT=8080"},
            "s1w0": {"TPUOPS_NUM_SLICES": "2", "TPUOPS_HOST_DEFAULTS": "MEGASCALE_PORT=8080"}}
    changed = with_hang_abort(envs, {})
    assert changed["s1w0"]["TPUOPS_HOST_DEFAULTS"] == f"MEGASCALE_PORT=8080 LIBTPU_INIT_ARGS={ABORT_ON_HANGS}"
    assert with_hang_abort(envs, {"LIBTPU_INIT_ARGS": "--xla_foo"}) == envs
    one = {"w0": {"TPUOPS_NUM_SLICES": "1"}}
    assert with_hang_abort(one, {}) == one


def finished_install(log: Path) -> str:
    """The log of the py-spy install the tools script started in the background, once pip has exited."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        if "tpuops: pip exited " in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"the py-spy install did not finish: {log}")


def capture_of_a_python_process(runner: LocalRunner, run_dir: Path) -> WorkerCapture:
    run_dir.mkdir(parents=True, exist_ok=True)
    started = runner.run(f"setsid python3 -c 'import time; time.sleep(60)' > /dev/null 2>&1 & echo $! > {run_dir}/pid")
    assert started.ok, started.error
    try:
        (capture,) = capture_all([runner], "c", run_dir.name)
    finally:
        runner.run(f"kill -KILL -$(cat {run_dir}/pid)")
    return capture


def test_in_a_venv_py_spy_is_installed_into_it_and_a_capture_without_it_says_why(tmp_path: Path) -> None:
    python = make_venv(tmp_path / "venv", with_pip=False, running_packages=False)  # a venv whose pip is missing
    home = tmp_path / "home"
    runner = LocalRunner("w0", home, base_env={"PATH": f"{python.parent}:/usr/bin:/bin"})
    never = capture_of_a_python_process(runner, home / "tpuops/c/runs/r0")
    assert "py-spy is not installed here (launch did not install it: " in never.stacks, never.stacks

    said = runner.run(script_command("watchdog_tools", "c"), capture=True, timeout=30).stdout.decode().strip()
    assert said == f"installing py-spy into the venv of python3 ({python.parent / 'python3'})"  # not --user
    log = finished_install(home / "tpuops/c/py-spy-install.log")
    assert f"{python.parent / 'python3'}: No module named pip" in log, log
    capture = capture_of_a_python_process(runner, home / "tpuops/c/runs/r1")
    assert "py-spy is not installed here (its install failed: " in capture.stacks, capture.stacks
    assert without_python_stacks([capture]).startswith(
        "w0: py-spy is not installed here (its install failed: ") and "No module named pip" in capture.stacks


def test_outside_a_venv_py_spy_is_installed_for_the_user(tmp_path: Path) -> None:
    base = Path(sys.base_prefix) / "bin" / "python3"  # the interpreter the suite's venv (if any) was made from
    if subprocess.run([str(base), "-m", "pip", "--version"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip(f"{base} has no pip")
    wheelhouse = tmp_path / "wheelhouse"  # pip finds "py-spy" here, not on PyPI
    script_wheel(wheelhouse, "py-spy", "0.0.1", "py-spy", b"#!/bin/sh\necho stand-in py-spy\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(base)
    home = tmp_path / "home"
    runner = LocalRunner("w0", home, base_env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PIP_NO_INDEX": "1",
                                               "PIP_FIND_LINKS": str(wheelhouse),
                                               "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    said = runner.run(script_command("watchdog_tools", "c"), capture=True, timeout=30).stdout.decode().strip()
    if said == "py-spy present":
        pytest.skip(f"{base} has py-spy already")
    assert said == "installing py-spy for the user"
    log = finished_install(home / "tpuops/c/py-spy-install.log")
    assert log.splitlines()[-1] == "tpuops: pip exited 0", log
    spy = home / ".local" / "bin" / "py-spy"
    assert os.access(spy, os.X_OK) and b"stand-in py-spy" in spy.read_bytes()
    assert runner.run(script_command("watchdog_tools", "c"), capture=True).stdout.decode().strip() == "py-spy present"


def test_the_probe_finds_the_trainers_metrics_port_and_says_why_there_are_no_metrics(
        tmp_path: Path, refused_port: int) -> None:
    import socket

    from tpuops.shipped import script_text
    from tpuops.watchdog.confirm import probe_all

    home = tmp_path / "home"
    run_dir = home / "tpuops" / "c" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    runner = LocalRunner("w0", home)

    def start_trainer(port: int) -> None:
        # A "trainer" in its own process group, with the metrics port in its environment, as libtpu would read it.
        start = (f"TPU_RUNTIME_METRICS_PORTS={port},{port + 1} setsid sleep 30 > /dev/null 2>&1 & "
                 f"echo $! > {run_dir}/pid")
        assert runner.run(start).ok

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        start_trainer(server.getsockname()[1])
        try:
            (probe,) = probe_all([runner], "c", "r1")
            assert probe.alive and probe.state == "running"
            assert probe.unavailable and probe.unavailable.startswith("tpu-info is not installed here")
        finally:
            runner.run(f"kill -KILL -$(cat {run_dir}/pid)")
    # A port where nothing listens, held bound for the test (one closed and given back may be another test's).
    start_trainer(refused_port)
    try:
        (probe,) = probe_all([runner], "c", "r1")
        assert probe.unavailable == (f"no libtpu metrics server on localhost:{refused_port} (not a TPU VM, or the "
                                     "runtime has not started)")
    finally:
        runner.run(f"kill -KILL -$(cat {run_dir}/pid)")
    assert "tpuops: libtpu's runtime metrics" in script_text("tpu_metrics.py")
