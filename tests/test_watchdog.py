"""The hang watchdog end to end: `tpuops run SPEC --watch` with a trainer that writes steps and then blocks on
worker 1 while the others wait for it (tests/watchdog_trainer/hang_trainer.py). On the local provider: three
hangs in an hour are a restart, a re-creation (worker 1 was the odd one twice) and then no more restarts, the
TPU kept; on real sshd workers behind the TPU API fake: detected, captured with py-spy (and the fallback where
py-spy is missing), relaunched with TPUOPS_RESUME=1, and the resumed run finishes.

The knobs are seconds here (TPUOPS_WATCHDOG_*): T between 1 and 2 s, a confirmation gap of half a second. The
trainer "compiles" for 3 s before its first step, longer than T: the first compile must not count.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available, tpus_answer_at, worker_python
from tests.venvs import make_venv, script_wheel

TRAINER = Path(__file__).parent / "watchdog_trainer" / "hang_trainer.py"
# The trainer, once the py-spy install `launch` started on this worker has finished (at most 60 s): a capture then
# meets the install's outcome, not a race with it.
AFTER_PY_SPY = """log="$HOME/tpuops/$TPUOPS_CLUSTER/py-spy-install.log"
i=0
until grep -q '^tpuops: pip exited' "$log" 2>/dev/null || [ "$i" -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
exec python3 hang_trainer.py "$@"
"""
SSHD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # what sshd gives root's sessions
WAIT_S = 120.0
FAST = {"TPUOPS_WATCH_INTERVAL": "0.3", "TPUOPS_WATCH_BACKOFF": "0.1", "TPUOPS_WATCHDOG_MIN_HANG": "1",
        "TPUOPS_WATCHDOG_MAX_HANG": "2", "TPUOPS_WATCHDOG_CONFIRM_GAP": "0.5"}
COMPILE_S = 3  # longer than T


def code_dir(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(TRAINER, code / TRAINER.name)
    (code / "after_py_spy.sh").write_text(AFTER_PY_SPY)
    return code


def starts(log: Path) -> list[str]:
    return sorted(log.read_text().splitlines()) if log.exists() else []


def incidents_in(folder: Path) -> list[tuple[Path, dict]]:
    return [(path.parent, json.loads(path.read_text())) for path in sorted(folder.glob("incidents/*/incident.json"))]


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    return process.returncode, stdout, stderr


def test_three_hangs_in_an_hour_restart_recreate_then_stop_and_keep_the_tpu(tmp_path: Path,
                                                                           tpuops_home: Path) -> None:
    name = f"wd-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "attempts"
    spec = write_spec(tmp_path, f"""
        name: {name}
        provider: local
        tpu: {{type: v2-8, workers: 3}}
        bucket: {{name: {name}-data}}
        code: {{path: {code_dir(tmp_path)}}}
        trainer: {{framework: jax, command: "python3 {TRAINER.name} {log} 99 {COMPILE_S}"}}
        """)
    env = {**os.environ, **FAST}
    process = subprocess.Popen([sys.executable, "-m", "tpuops", "run", str(spec), "--watch", "--down", "--json"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        code, stdout, stderr = finish(process)
        assert code == 1, stderr[-4000:]
        # Relaunched twice, resuming, on every worker; then no more.
        assert starts(log) == sorted(f"w{w} restart={r} resume={min(r, 1)}" for w in range(3) for r in range(3)), \
            stderr[-4000:]
        summary = json.loads(stdout)
        assert summary["watch"]["restarts"] == 2 and summary["watch"]["keep_tpu"] and not summary["torn_down"]
        assert "stopped restarting (hung again after the TPU was re-created within 1h)" in stderr
        assert (tpuops_home / "local" / "tpus" / f"{name}.json").exists()  # --down did not delete the TPU

        records = tpuops_home / "local" / "buckets" / f"{name}-data" / ".tpuops" / name
        found = incidents_in(records)
        assert [(i["kind"], i["odd_worker"], i["action"], i["last_step"]) for _, i in found] == [
            ("stall", "w1", "restart", 5), ("stall", "w1", "recreate", 5), ("stall", "w1", "stop", 5)]
        folder = found[0][0]
        assert "stuck_reading_data (hang_trainer.py" in (folder / "w1" / "stacks.txt").read_text()
        for worker in ("w0", "w2"):
            assert "wait_for_peers (hang_trainer.py" in (folder / worker / "stacks.txt").read_text()
            assert (folder / worker / "output.txt").read_text().splitlines()[-1] == "step 5"
            assert "no libtpu metrics server on localhost:8431" in (folder / worker / "metrics.txt").read_text()
        assert "not a hang" not in stderr  # the 3 s compile before step 1 was never taken for one

        shown = run_cli("status", name, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "watchdog: last step 5, " in shown.stdout
        assert "stopped restarting after a hang, the TPU and the hung run are kept for you" in shown.stdout
        listed = run_cli("logs", name, "--incidents", "--json", timeout=60)
        assert [json.loads(line)["action"] for line in listed.stdout.splitlines()] == ["restart", "recreate", "stop"]
    finally:
        if process.poll() is None:
            process.kill()
        run_cli("stop", name, timeout=60)  # the kept, hung run
        run_cli("down", name, "--yes", timeout=60)
    assert subprocess.run(["pgrep", "-f", str(log)], capture_output=True, timeout=10).stdout == b""


# ------------------------------------------------------------------------------------------------- sshd


def py_spy_binary() -> Path:
    """The real py-spy executable (not pyenv's shim script), which the dev extras install: beside the running
    interpreter (a venv's, activated or not), else on PATH."""
    beside_python = Path(sys.executable).parent / "py-spy"
    if beside_python.exists():
        return beside_python
    found = shutil.which("py-spy")
    if found is None:
        pytest.skip("py-spy is not installed (pip install -e '.[dev]')")
    return Path(found).resolve()


@pytest.fixture(scope="module")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    """Two workers whose python3 is a venv's, as when the trainer runs from one: w1's venv has pip, which finds
    py-spy (the real binary, in a wheel) in a local wheelhouse instead of PyPI; w0's venv has no pip, so the
    install `launch` starts there fails."""
    if not sshd_available():
        pytest.skip("needs root and OpenSSH sshd")
    base = worker_python()
    if base is None:
        pytest.skip("no python3 the workers can run")
    root = tmp_path_factory.mktemp("sshd-watchdog")
    wheelhouse = root / "wheelhouse"
    script_wheel(wheelhouse, "py-spy", "0.0.1", "py-spy", py_spy_binary().read_bytes())
    pythons = [make_venv(root / "venv-w0", with_pip=False, running_packages=False, base=base),
               make_venv(root / "venv-w1", running_packages=False, base=base)]
    pip = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    paths = {index: {"PATH": f"{python.parent}:{SSHD_PATH}"} for index, python in enumerate(pythons)}
    with SshdCluster(root / "sshd", 2, env=pip, worker_env=paths) as cluster:
        yield cluster


@pytest.fixture
def gcp(fake_gcp: FakeGcp, sshd2: SshdCluster, tpu_paths_in_worker_homes: None) -> FakeGcp:  # noqa: F811
    return tpus_answer_at(fake_gcp, lambda name, index: sshd2.workers[index])


def test_a_hang_on_ssh_workers_is_captured_and_the_run_resumes(gcp: FakeGcp, sshd2: SshdCluster,
                                                               tpuops_home: Path, tmp_path: Path) -> None:
    venvs = sshd2.root.parent
    name = f"wd-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "attempts"
    spec = write_spec(tmp_path, f"""
        name: {name}
        zone: us-central2-b
        tpu: {{type: v4-16, runtime: tpu-ubuntu2204-base, preemptible: true}}
        ssh: {{user: root, port: {sshd2.port}}}
        code: {{path: {code_dir(tmp_path)}}}
        trainer: {{framework: jax, command: "sh after_py_spy.sh {log} 1 {COMPILE_S}"}}
        """)
    cluster_dir = tpuops_home / "clusters" / name
    cluster_dir.mkdir(parents=True)
    shutil.copy(sshd2.client_key, cluster_dir / "id_ed25519")
    (cluster_dir / "id_ed25519").chmod(0o600)
    # launch installs py-spy on the workers here (the suite turns that off elsewhere: it would ask PyPI).
    process = subprocess.Popen([sys.executable, "-m", "tpuops", "run", str(spec), "--watch"],
                               env={**os.environ, **gcp.env, **FAST, "TPUOPS_WATCHDOG_INSTALL": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        code, stdout, stderr = finish(process)
    finally:
        run_cli("stop", name, env=gcp.env, timeout=60)
    assert code == 0, stderr[-4000:]
    assert starts(log) == sorted(f"w{w} restart={r} resume={r}" for w in range(2) for r in range(2))
    assert len(gcp.tpu_v2.server.calls("DELETE", rf"/nodes/{name}$")) == 0  # relaunched on the same TPU
    (folder, found), = incidents_in(cluster_dir / "watchdog")  # no bucket: beside the cluster's state
    assert (found["kind"], found["action"], found["last_step"]) == ("stall", "restart", 5)
    # w1: py-spy went into the venv of the worker's python3 (pip refuses --user there) and dumped the trainer.
    assert "stuck_reading_data (hang_trainer.py" in (folder / "w1" / "stacks.txt").read_text()
    assert (venvs / "venv-w1" / "bin" / "py-spy").is_file()
    assert not (sshd2.workers[1].home / ".local" / "bin" / "py-spy").exists()
    # w0: its install failed; the fallback, and the incident, say why there are no Python stacks.
    fallback = (folder / "w0" / "stacks.txt").read_text()
    why = "py-spy is not installed here (its install failed: "
    assert why in fallback and "No module named pip" in fallback and "wchan hrtimer_nanosleep" in fallback
    assert f"no Python stacks (w0: {why}" in found["reason"] and "No module named pip" in found["reason"]
    assert (folder / "w0" / "output.txt").read_text().splitlines()[-1] == "step 5"
    state = json.loads((cluster_dir / "state.json").read_text())
    hangs = [e["message"] for e in state["events"] if e["kind"] == "hang"]
    assert any("hang (stall) of run" in m and "restarting the run (the TPU is kept)" in m for m in hangs), hangs
    assert any(f"no Python stacks (w0: {why}" in m for m in hangs), hangs
    assert [run["restart"] for run in state["runs"]] == [0, 1]
