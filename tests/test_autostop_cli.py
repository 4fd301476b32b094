"""The cost guard as users run it: `autostop:` in the spec, `up --autostop`, `tpuops autostop NAME 30m|off`,
`status` and `down` through the CLI. On the local provider (the agent deletes the simulated TPU), and on a
loopback sshd worker with the wire fakes and a fake metadata server (a 403 on delete shows in `status`).
Ticks are a fraction of a second (TPUOPS_AUTOSTOP_TICK)."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.cloud import FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.metadata import MetadataFake
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec
from tests.sshd import SshdCluster, sshd_available, tpus_answer_at
from tests.test_autostop_agent import wait_for

FAST = {"TPUOPS_AUTOSTOP_TICK": "0.2"}


def local_spec(tmp_path: Path, autostop: str = "", command: str = "true") -> tuple[str, Path]:
    name = f"as-{uuid.uuid4().hex[:6]}"
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('hi')\n")
    spec = write_spec(tmp_path, f"""
        name: {name}
        provider: local
        tpu: {{type: v2-8, workers: 1}}
        bucket: {{name: {name}-b}}
        code: {{path: code}}
        trainer:
          framework: jax
          command: {json.dumps(command)}
        {autostop}
        """)
    return name, spec


def cli(*args: str, env: dict[str, str] | None = None):  # noqa: ANN201
    return run_cli(*args, env={**FAST, **(env or {})})


def tpu_exists(home: Path, name: str) -> bool:
    return (home / "local" / "tpus" / f"{name}.json").exists()


def record_path(home: Path, name: str) -> Path:
    """Where the agent leaves gs://BUCKET/.tpuops/NAME/autostop.json on the local provider."""
    return home / "local" / "buckets" / f"{name}-b" / ".tpuops" / name / "autostop.json"


@pytest.fixture
def cleanup(tpuops_home: Path) -> Iterator[list[str]]:
    """Clusters a test made: `down` stops their agents (and the simulated TPU's processes) at the end."""
    names: list[str] = []
    yield names
    for name in names:
        run_cli("down", name, "--yes", "--delete-bucket", "--force")


def test_an_idle_tpu_is_deleted_and_status_says_why(tmp_path: Path, tpuops_home: Path, cleanup: list[str]) -> None:
    name, spec = local_spec(tmp_path, "autostop: {idle: 30m}")
    cleanup.append(name)
    plan = cli("plan", str(spec))
    assert "Autostop: idle 30m" in plan.stdout, plan.stdout

    up = cli("up", str(spec))
    assert up.returncode == 0, up.stderr
    assert "autostop: agent running on w0" in up.stdout
    status = cli("status", name)
    assert "autostop: idle 30m (running, fires in" in status.stdout and "local simulator: free" in status.stdout
    assert cli("autostop", name, "2s").returncode == 0  # a new, short idle time: it fires within seconds

    wait_for("the idle TPU to be deleted", lambda: not tpu_exists(tpuops_home, name))
    wait_for("the agent's record", lambda: record_path(tpuops_home, name).exists())  # written after deleting
    gone = cli("status", name)
    assert gone.returncode == 0, gone.stderr
    assert "TPU deleted by autostop at" in gone.stdout and "(idle:" in gone.stdout, gone.stdout
    assert (tpuops_home / "local" / "buckets" / f"{name}-b").is_dir()  # never the bucket

    # Commands that need the workers say so before connecting, and how to bring the TPU back.
    for args in (["autostop", name, "30s"], ["exec", name, "--", "true"], ["launch", name]):
        refused = cli(*args)
        assert refused.returncode == 1, refused.stderr
        [line] = refused.stderr.splitlines()
        assert f"the TPU of '{name}' is gone: deleted by autostop at " in line and "(idle:" in line, line
        assert f"`tpuops up {spec}` brings it back" in line
    down = cli("down", name, "--yes", "--delete-bucket", "--force")  # down still works: the agent went with it
    assert down.returncode == 0, down.stderr
    cleanup.remove(name)


def test_a_running_trainer_keeps_the_tpu_until_it_ends(tmp_path: Path, tpuops_home: Path,
                                                       cleanup: list[str]) -> None:
    name, spec = local_spec(tmp_path, command='mkdir -p "$JAX_COMPILATION_CACHE_DIR" && '
                                              'printf 12345 > "$JAX_COMPILATION_CACHE_DIR/entry"; sleep 12')
    cleanup.append(name)
    assert cli("up", str(spec)).returncode == 0
    launched = cli("launch", name)
    assert launched.returncode == 0, launched.stderr
    set_ = cli("autostop", name, "1s")
    assert set_.returncode == 0, set_.stderr
    assert "autostop set (idle 1s)" in set_.stdout

    time.sleep(3)  # three idle times over, with the run alive: the TPU stays
    assert tpu_exists(tpuops_home, name)
    wait_for("the TPU to go once the run ended", lambda: not tpu_exists(tpuops_home, name))
    wait_for("the agent's record", lambda: record_path(tpuops_home, name).exists())  # written after deleting
    cache = record_path(tpuops_home, name).parent / "jax-cache"
    record = json.loads(record_path(tpuops_home, name).read_text())
    assert record["reason"] == "idle" and record["node"] == name
    assert (cache / "entry").read_text() == "12345"  # JAX_COMPILATION_CACHE_DIR pointed into the bucket
    status = cli("status", name)
    assert "JAX compilation cache: 5 B in the bucket" in status.stdout, status.stdout


def test_autostop_off_stops_the_countdown_and_a_new_time_lifts_it(tmp_path: Path, tpuops_home: Path,
                                                                  cleanup: list[str]) -> None:
    name, spec = local_spec(tmp_path)
    cleanup.append(name)
    up = cli("up", str(spec), "--autostop", "30s")
    assert up.returncode == 0 and "autostop: agent running on w0" in up.stdout, up.stderr
    off = cli("autostop", name, "off", "--json")
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout) == {"cluster": name, "setting": "off", "worker": "w0", "error": None}
    status = cli("status", name)
    assert "(keep-alive (countdown stopped))" in status.stdout, status.stdout
    assert list(tpuops_home.glob(f"local/workers/{name}/*/tpuops/{name}/keep-alive"))

    assert cli("launch", name).returncode == 0  # launch refreshes the agent: `off` stays in force
    time.sleep(1)
    assert tpu_exists(tpuops_home, name)
    assert cli("autostop", name, "1s").returncode == 0
    wait_for("the TPU to be deleted", lambda: not tpu_exists(tpuops_home, name))


def test_watch_ends_when_autostop_deleted_the_tpu_and_recreates_nothing(tmp_path: Path, tpuops_home: Path,
                                                                       cleanup: list[str]) -> None:
    # max_hours fires whatever runs: 0.004 h (14 s) after `up`, while the run sleeps on.
    name, spec = local_spec(tmp_path, "autostop: {idle: 30m, max_hours: 0.004}", command="sleep 120")
    cleanup.append(name)
    assert cli("up", str(spec)).returncode == 0
    assert cli("launch", name).returncode == 0
    watched = run_cli("watch", name, "--json", env={**FAST, "TPUOPS_WATCH_INTERVAL": "0.5"}, timeout=90)

    assert watched.returncode == 0, watched.stderr
    result = json.loads(watched.stdout)
    assert "deleted by autostop" in result["reason"] and "max_hours" in result["reason"], result
    assert result["restarts"] == 0 and not tpu_exists(tpuops_home, name)  # not taken for a preemption


def test_a_bad_duration_is_one_line_with_examples(tmp_path: Path) -> None:
    name, spec = local_spec(tmp_path)
    result = cli("up", str(spec), "--autostop", "3 days")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "30m" in result.stderr and "off" in result.stderr
    assert not run_cli("status").stdout.count(name)  # nothing created


@pytest.mark.parametrize("command", [["up", "SPEC", "--autostop", "10"], ["autostop", "NAME", "10"],
                                     ["up", "SPEC", "--autostop", "90"]])
def test_a_bare_number_is_refused_with_the_unit_to_write(tmp_path: Path, tpuops_home: Path, command: list[str]) -> None:
    """`sky launch -i 10` means ten minutes; tpuops used to read ten seconds and delete the TPU a minute after
    the run ended. A number without its unit is refused, saying what to write."""
    name, spec = local_spec(tmp_path)
    result = cli(*[{"SPEC": str(spec), "NAME": name}.get(arg, arg) for arg in command])
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    number = command[-1]
    assert f"autostop time {number} has no unit" in line and f"write {number}m for {number} minutes" in line, line
    assert ("or 10s for seconds" if number == "10" else "or 1m30s for 90 seconds") in line, line
    assert not tpu_exists(tpuops_home, name)


def test_a_bare_number_in_the_spec_is_refused_on_its_line(tmp_path: Path) -> None:
    _, spec = local_spec(tmp_path, "autostop: {idle: 10}")
    result = cli("plan", str(spec))
    assert result.returncode == 2
    assert "autostop.idle: autostop time 10 has no unit" in result.stderr and "write 10m" in result.stderr


def test_a_setting_from_the_command_line_kept_by_a_later_up_is_said(tmp_path: Path, tpuops_home: Path,
                                                                  cleanup: list[str]) -> None:
    name, spec = local_spec(tmp_path, "autostop: {idle: 30m}")
    cleanup.append(name)
    assert cli("up", str(spec), "--autostop", "2h").returncode == 0
    again = cli("up", str(spec))
    assert again.returncode == 0, again.stderr
    kept = (f"  autostop {name}: idle 2h kept from an earlier --autostop or `tpuops autostop` (the spec says idle "
            f"30m); `tpuops autostop {name} DURATION|off` changes it")
    assert kept in again.stderr.splitlines(), again.stderr
    assert json.loads(cli("up", str(spec), "--json").stdout)["autostop_kept"] == kept.split(": ", 1)[1]
    assert cli("up", str(spec), "--autostop", "30m").returncode == 0  # back to what the spec says: nothing to say
    plain = cli("up", str(spec))
    assert "kept from an earlier" not in plain.stderr and plain.returncode == 0, plain.stderr


def test_down_stops_the_agent_first(tmp_path: Path, tpuops_home: Path) -> None:
    name, spec = local_spec(tmp_path, "autostop: {idle: 30m}")
    assert cli("up", str(spec)).returncode == 0
    down = cli("down", name, "--yes", "--delete-bucket", "--force")
    assert down.returncode == 0, down.stderr
    assert "autostop w0: stopped" in down.stderr
    assert not tpu_exists(tpuops_home, name)


# ----------------------------------------------------------------------------------- GCP + sshd + metadata


@pytest.fixture
def sshd1(tmp_path: Path) -> Iterator[SshdCluster]:
    if not sshd_available():
        pytest.skip("needs root and OpenSSH sshd")
    with SshdCluster(tmp_path / "sshd", 1) as cluster:
        yield cluster


def test_a_refused_delete_shows_in_status_with_the_role_to_grant(
        fake_gcp: FakeGcp, sshd1: SshdCluster, tmp_path: Path, tpuops_home: Path,  # noqa: F811
        tpu_paths_in_worker_homes: None) -> None:
    worker = sshd1.workers[0]
    tpus_answer_at(fake_gcp, lambda name, index: worker)
    fake_gcp.tpu_v2.server.faults.http_error("DELETE", r"/nodes/", 403, times=-1,
                                             message="Permission 'tpu.nodes.delete' denied")
    metadata = MetadataFake().start()
    name = f"gs-{uuid.uuid4().hex[:6]}"
    bucket = f"tpuops-b-{uuid.uuid4().hex[:8]}"  # the agent writes its record there before it asks to delete
    spec = write_spec(tmp_path, f"""
        name: {name}
        zone: us-central2-b
        tpu: {{type: v4-8, runtime: tpu-ubuntu2204-base}}
        bucket: {{name: {bucket}}}
        ssh: {{user: root, port: {sshd1.port}}}
        autostop: {{idle: 1s}}
        """)
    cluster_dir = tpuops_home / "clusters" / name
    cluster_dir.mkdir(parents=True)
    shutil.copy(sshd1.client_key, cluster_dir / "id_ed25519")
    shutil.copy(sshd1.client_key.with_suffix(".pub"), cluster_dir / "id_ed25519.pub")
    (cluster_dir / "id_ed25519").chmod(0o600)
    env = {**fake_gcp.env, **FAST, "GCE_METADATA_HOST": metadata.host}
    try:
        up = run_cli("up", str(spec), env=env)
        assert up.returncode == 0, up.stderr
        assert "autostop: agent running on w0" in up.stdout, up.stdout + up.stderr
        [created] = fake_gcp.tpu_v2.server.calls("POST", r"/nodes$")
        assert created.body["serviceAccount"]["scope"] == ["https://www.googleapis.com/auth/cloud-platform"]

        def refused() -> str | None:
            status = run_cli("status", name, env=env)
            return status.stdout if "last delete failed" in status.stdout else None

        text = str(wait_for("the refused delete in status", refused))
        assert "403" in text and "roles/tpu.admin" in text, text
        assert fake_gcp.tpu.get_node("us-central2-b", name, "vm") is not None
        # The record the agent wrote before asking does not make the billing TPU "gone" (it said so, exit 1).
        assert fake_gcp.storage().bucket(bucket).blob(f".tpuops/{name}/autostop.json").exists()
        status = run_cli("status", name, "--json", env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        shown = json.loads(status.stdout)
        assert shown["tpu_state"] == "READY" and shown["guard"]["deleted_by_autostop"] is None, shown
        assert "403" in shown["guard"]["autostop"]["last_failure"], shown
        assert "is gone" not in status.stderr
        exec_ = run_cli("exec", name, "echo still-here", env=env)
        assert exec_.returncode == 0 and "still-here" in exec_.stdout, exec_.stdout + exec_.stderr
        assert all(r.headers.get("metadata-flavor") == "Google" for r in metadata.token_requests())
        assert metadata.token_requests()
    finally:
        run_cli("autostop", name, "off", env=env)
        metadata.stop()


def test_a_legacy_node_refuses_autostop_in_plan(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: node-as
        zone: europe-west4-a
        tpu: {type: v3-8, mode: node, runtime: "2.12.0"}
        client_vm: {machine_type: n1-standard-2}
        autostop: {idle: 30m}
        """)
    result = run_cli("plan", str(spec))
    assert result.returncode == 2
    assert "autostop runs on a TPU VM's worker 0; a legacy TPU Node has none" in result.stderr
    assert ":5: autostop" in result.stderr  # file:line: field
