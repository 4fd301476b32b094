"""The hang watchdog's judgement, piece by piece: the step series and its threshold (a slow trainer, a long first
compile, a checkpoint being written), the restart policy, the classification of probes, the spec's `watch:`
section, the scalar source on real event files, and the host scripts that find py-spy and read output."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import write_spec
from tests.logs_writers import TbWriter
from tpuops.cloud.blobs import DirBlobStore
from tpuops.errors import SpecError
from tpuops.remote.local import LocalRunner
from tpuops.shipped import script_command
from tpuops.spec import load_spec
from tpuops.watchdog.confirm import classify, parse_probe
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


def test_spec_watch_section(tmp_path: Path) -> None:
    base = "name: c\nprovider: local\ntpu: {type: v2-8}\n"
    spec = load_spec(write_spec(tmp_path, base + 'watch: {progress: "it (\\\\d+)/", hang_after: 20m}\n'))
    assert spec.watch.progress == r"it (\d+)/" and spec.watch.hang_after == 1200.0 and spec.watch.watchdog
    settings = WatchdogSettings.from_spec(spec.watch, {"TPUOPS_WATCHDOG_MIN_HANG": "2", "TPUOPS_WATCHDOG": "0"})
    assert (settings.progress, settings.hang_after, settings.min_hang, settings.enabled) == \
        (r"it (\d+)/", 1200.0, 2.0, False)
    for bad, message in (('watch: {progress: "step \\\\d+"}', "needs a group"),
                         ('watch: {progress: "step (("}', "bad regular expression"),
                         ("watch: {hang_after: soon}", "cannot read"),
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


def test_the_tools_script_finds_py_spy_or_installs_it_for_the_user_detached(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/pip-args\n')
    (fake_bin / "python3").chmod(0o755)
    runner = LocalRunner("w0", tmp_path / "home", base_env={"PATH": f"{fake_bin}:/usr/bin:/bin"})
    result = runner.run(script_command("watchdog_tools", "c"), capture=True, timeout=30)
    assert result.stdout.decode().strip() == "installing py-spy"
    for _ in range(100):
        if (tmp_path / "pip-args").exists():
            break
        time.sleep(0.05)
    assert (tmp_path / "pip-args").read_text().split() == ["-m", "pip", "install", "--user", "--quiet", "py-spy"]
    spy = tmp_path / "home" / ".local" / "bin" / "py-spy"
    spy.parent.mkdir(parents=True)
    spy.write_text("#!/bin/sh\n")
    spy.chmod(0o755)
    assert runner.run(script_command("watchdog_tools", "c"), capture=True).stdout.decode().strip() == "py-spy present"


def test_the_probe_finds_the_trainers_metrics_port_and_says_why_there_are_no_metrics(tmp_path: Path) -> None:
    import socket

    from tpuops.shipped import script_text
    from tpuops.watchdog.confirm import probe_all

    home = tmp_path / "home"
    run_dir = home / "tpuops" / "c" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        runner = LocalRunner("w0", home)
        # A "trainer" in its own process group, with the metrics port in its environment, as libtpu would read it.
        start = (f"TPU_RUNTIME_METRICS_PORTS={port},{port + 1} setsid sleep 30 > /dev/null 2>&1 & "
                 f"echo $! > {run_dir}/pid")
        assert runner.run(start).ok
        try:
            (probe,) = probe_all([runner], "c", "r1")
            assert probe.alive and probe.state == "running"
            assert probe.unavailable and probe.unavailable.startswith("tpu-info is not installed here")
            server.close()
            (probe,) = probe_all([runner], "c", "r1")
            assert probe.unavailable == (f"no libtpu metrics server on localhost:{port} (not a TPU VM, or the "
                                         "runtime has not started)")
        finally:
            runner.run(f"kill -KILL -$(cat {run_dir}/pid)")
    assert "tpuops: libtpu's runtime metrics" in script_text("tpu_metrics.py")
