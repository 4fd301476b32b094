"""The cost guard's client side: durations, the spec section, the agent's configuration, the local provider's
agent end to end, the agent installed over SSH on a loopback sshd worker, status view and cost so far."""

from __future__ import annotations

import ast
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tests.fakes.cloud import PROJECT, FakeGcp, fake_gcp  # noqa: F401  (pytest fixture)
from tests.fakes.metadata import MetadataFake
from tests.fakes.tpu_model import FakeNode
from tests.gcs_emulator import gcs_emulator  # noqa: F401  (pytest fixture)
from tests.sshd import SshdCluster, sshd_available
from tests.test_autostop_agent import ZONE, wait_for
from tpuops.autostop.client import (
    agent_config,
    autostop_view,
    change_setting,
    cost_so_far,
    install_on_worker0,
    stop_for_down,
)
from tpuops.autostop.remote import AgentFailure, AgentReport, read_agent, stop_agent
from tpuops.cloud.base import TpuRequest
from tpuops.cloud.local.apis import LocalCloud
from tpuops.durations import format_duration, parse_autostop
from tpuops.errors import UsageError
from tpuops.providers.local import LocalProvider, autostop_target
from tpuops.remote.local import LocalRunner, worker_path
from tpuops.remote.ssh import KnownHosts, SshRunner, SshSettings, SshTarget, load_private_key
from tpuops.shipped import program
from tpuops.spec.autostop import AutostopSpec
from tpuops.state import record_prefix
from tpuops.state.autostop import AutostopRecord, read_record

FAST = {"TPUOPS_AUTOSTOP_TICK": "0.1"}


# ---------------------------------------------------------------------------------------------- units


def test_the_agent_is_python_3_8_syntax_and_standard_library_only() -> None:
    tree = ast.parse(program("autostop_agent"), feature_version=(3, 8))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    import sys

    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    assert not any(isinstance(node, ast.NamedExpr) for node in ast.walk(tree))


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800.0), ("2h", 7200.0), ("90s", 90.0), ("1h30m", 5400.0),
                                               ("OFF", None), (" off ", None), ("45s", 45.0)])
def test_autostop_durations(text: str, seconds: float | None) -> None:
    assert parse_autostop(text) == seconds


@pytest.mark.parametrize(("text", "hint"), [("10", "write 10m for 10 minutes (what `sky launch -i 10` means), or "
                                                    "10s for seconds"),
                                            ("1800", "or 30m for 1800 seconds")])
def test_a_bare_number_says_which_unit_to_write(text: str, hint: str) -> None:
    with pytest.raises(UsageError, match=f"autostop time {text} has no unit") as caught:
        parse_autostop(text)
    assert hint in (caught.value.hint or "")


@pytest.mark.parametrize("text", ["", "30x", "m30", "0", "0m", "-5m", "on", "2 h"])
def test_an_unreadable_autostop_time_is_one_error_with_examples(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_autostop(text)
    assert "30m" in str(caught.value) and "off" in str(caught.value)


@pytest.mark.parametrize(("seconds", "text"), [(45, "45s"), (1800, "30m"), (5400, "1h30m"), (7200, "2h"),
                                               (90061, "1d1h"), (0.4, "0s")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_the_spec_section_reads_yaml_as_users_write_it() -> None:
    assert AutostopSpec() == AutostopSpec(idle=None, max_hours=None) and not AutostopSpec().enabled
    section = AutostopSpec.model_validate(yaml.safe_load("idle: 30m\nmax_hours: 12"))
    assert section.idle == 1800.0 and section.max_hours == 12 and section.describe() == "idle 30m, max 12h"
    assert AutostopSpec.model_validate(yaml.safe_load("idle: off")).idle is None  # YAML's off is False
    for bad in ("idle: 3 days", "idle: yes", "max_hours: 0", "idel: 30m"):
        with pytest.raises(ValidationError):
            AutostopSpec.model_validate(yaml.safe_load(bad))
    schema = AutostopSpec.model_json_schema()["properties"]["idle"]
    assert {"type": "string", "pattern": schema["anyOf"][0]["pattern"]} in schema["anyOf"]


def test_agent_config_takes_the_clis_endpoints_and_a_test_tick() -> None:
    env = {"CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": "http://127.0.0.1:8123/", "STORAGE_EMULATOR_HOST": "127.0.0.1:9000",
           "GCE_METADATA_HOST": "127.0.0.1:8124", **FAST}
    config = agent_config(cluster="c", provider="gcp", project="p", zone=ZONE, node="n", queued="q",
                          setting=AutostopSpec(idle="30m"), created_at=1.0, bucket="b", device_glob="/dev/vfio/*",
                          env=env)
    assert (config.tpu_endpoint, config.storage_endpoint, config.metadata_host) == (
        "http://127.0.0.1:8123", "http://127.0.0.1:9000", "127.0.0.1:8124")
    assert config.tick_seconds == config.warn_seconds == 0.1 and config.idle_seconds == 1800.0
    production = agent_config(cluster="c", provider="gcp", project="p", zone=ZONE, node="n", queued=None,
                              setting=AutostopSpec(idle="30m"), created_at=1.0, bucket=None,
                              device_glob="/dev/accel*", env={})
    assert production.tick_seconds == production.warn_seconds == 60.0
    assert production.tpu_endpoint is production.metadata_host is None  # the agent's defaults: Google's
    json.dumps(production.as_json())  # what goes to the worker is plain JSON


def test_a_record_concerns_only_the_tpu_it_deleted() -> None:
    record = AutostopRecord("c", "2026-11-24T10:00:00Z", "idle", "", "c", None, 60.0, "2026-11-24T09:59:00Z")
    assert record.concerns("c", "2026-11-24T09:59:00+00:00")
    assert record.concerns("c", None)  # state from before creation times were kept
    assert not record.concerns("c", "2026-11-24T11:30:00+00:00")  # a later TPU of the same name
    assert not record.concerns("other", "2026-11-24T09:59:00+00:00")


def test_cost_so_far_at_the_catalogs_list_price() -> None:
    cost = cost_so_far(list_prices=True, accelerator_type="v3-8", spot=False, created_at=0.0, now=2 * 3600)
    assert cost.per_hour == pytest.approx(8.0) and cost.dollars == pytest.approx(16.0)
    assert "TRC quota: free" in cost.note and "$16.00 so far" in cost.line() and "up 2h" in cost.line()
    spot = cost_so_far(list_prices=True, accelerator_type="v3-8", spot=True, created_at=0.0, now=3600)
    assert spot.dollars == pytest.approx(2.4)
    node = cost_so_far(list_prices=True, accelerator_type="v2-8", spot=False, created_at=0.0, now=3600,
                       client_vm_machine_type="n1-standard-2", client_vm_disk_gb=50)
    assert node.per_hour > 4 * 1.125
    slices = cost_so_far(list_prices=True, accelerator_type="v4-16", spot=False, created_at=0.0, now=3600,
                         slices=2)  # Multislice: every slice is billed
    one = cost_so_far(list_prices=True, accelerator_type="v4-16", spot=False, created_at=0.0, now=3600)
    assert slices.dollars == pytest.approx(2 * one.dollars) and one.dollars > 0
    local = cost_so_far(list_prices=False, accelerator_type="v3-8", spot=False, created_at=0.0, now=60)
    assert local.dollars == 0.0 and local.line() == "up 1m, local simulator: free"


def test_the_status_view_says_setting_time_left_and_the_role_to_grant() -> None:
    failure = AgentFailure("2025-01-01T00:00:00Z", 403, "delete failed: HTTP 403: denied",
                           "grant roles/tpu.admin to sa@x on project p", 3)
    report = AgentReport("w0", installed=True, running=True, state="delete-failed", now=100.0, fires_at=160.0,
                         idle_limit=1800.0, max_hours=12.0, last_failure=failure)
    view = autostop_view(report)
    assert view.setting == "idle 30m, max 12h" and view.time_left == "1m" and view.agent == "running"
    assert "roles/tpu.admin" in view.last_failure and "3 attempts" in view.last_failure
    assert "fires in 1m" in view.line() and json.dumps(view.as_dict())
    assert autostop_view(AgentReport("w0", installed=False)).line() == "autostop: off"
    unreachable = autostop_view(AgentReport("w0", installed=False, error="w0: connection refused"))
    assert unreachable.agent == "unreachable" and unreachable.reason == "w0: connection refused"


# --------------------------------------------------------------------------------------- local provider


def test_the_local_providers_agent_deletes_the_simulated_tpu_and_leaves_its_record(tmp_path: Path) -> None:
    provider = LocalCloud(tmp_path / "cloud")
    cluster, node = "quick", "quick-tpu"
    provider.create_bucket("quick-data", "local", {})
    provider.create_node(TpuRequest(node, "local", "v3-8", "local", labels={"tpuops-cluster": cluster}, workers=2))
    runner = LocalRunner("w0", provider.worker_home(node, 0))
    config = agent_config(cluster=cluster, provider="local", project="local", zone="local", node=node, queued=None,
                          setting=AutostopSpec(idle="1s"), created_at=time.time() - 7200, bucket="quick-data",
                          device_glob="~/dev/accel*", env=FAST,
                          local=autostop_target(tmp_path / "cloud", cluster, node, None, "quick-data"))
    try:
        installed = install_on_worker0(runner, config)
        assert installed.started, installed.error
        wait_for("the simulated TPU to be deleted", lambda: provider.get_node("local", node) is None)
        assert not (tmp_path / "cloud" / "workers" / node).exists()
        store = LocalProvider({}, tmp_path / "cloud").blob_store(record_prefix("quick-data", cluster))
        record = wait_for("the record", lambda: read_record(store))
        assert record.reason == "idle" and record.node == node and "deleted by autostop" in record.line(confirmed=True)
        assert provider.get_bucket("quick-data") is not None
    finally:
        stop_agent(runner, cluster, keep_alive=False)


def test_autostop_off_then_a_new_setting_through_the_ops_helpers(tmp_path: Path) -> None:
    provider = LocalCloud(tmp_path / "cloud")
    provider.create_node(TpuRequest("t", "local", "v3-8", "local", labels={"tpuops-cluster": "c"}, workers=1))
    runner = LocalRunner("w0", provider.worker_home("t", 0), {"PATH": worker_path()})

    def config(idle: str):  # noqa: ANN202
        return agent_config(cluster="c", provider="local", project="local", zone="local", node="t", queued=None,
                            setting=AutostopSpec(idle=idle), created_at=time.time(), bucket=None,
                            device_glob="~/dev/accel*", env=FAST,
                            local=autostop_target(tmp_path / "cloud", "c", "t", None, None))

    try:
        assert install_on_worker0(runner, config("30m")).started
        off = change_setting(runner, None, "c")
        assert off.was_running and off.keep_alive
        assert install_on_worker0(runner, config("1s")).started  # launch's refresh: still kept alive
        wait_for("keep-alive decisions", lambda: (r := read_agent(runner, "c")).keep_alive and r.state == "keep-alive")
        assert provider.get_node("local", "t") is not None
        assert change_setting(runner, config("1s"), "c").started  # `tpuops autostop c 1s` lifts it
        wait_for("the TPU to be deleted", lambda: provider.get_node("local", "t") is None)
    finally:
        stop_for_down(runner, "c")


# ------------------------------------------------------------------------------------------ over SSH


@pytest.fixture
def sshd_worker(tmp_path: Path) -> Iterator[SshdCluster]:
    if not sshd_available():
        pytest.skip("needs root and OpenSSH sshd")
    with SshdCluster(tmp_path / "sshd", 1) as cluster:
        yield cluster


def ssh_runner(cluster: SshdCluster, tmp_path: Path) -> SshRunner:
    worker = cluster.workers[0]
    key = tmp_path / "id_ed25519"
    key.write_bytes(cluster.client_key.read_bytes())
    key.chmod(0o600)
    known = tmp_path / "known_hosts"
    known.write_text(worker.host_key_line() + "\n")
    settings = SshSettings(key, known, connect_timeout=20)
    return SshRunner(SshTarget("w0", worker.host, worker.port, "root"), settings,
                     KnownHosts(known, trust_on_first_use=False), load_private_key(key))


def test_the_agent_installed_over_ssh_outlives_the_session_and_deletes_the_idle_tpu(
        sshd_worker: SshdCluster, fake_gcp: FakeGcp, tmp_path: Path) -> None:  # noqa: F811
    metadata = MetadataFake().start()
    cluster = f"s-{uuid.uuid4().hex[:6]}"
    node = f"n-{uuid.uuid4().hex[:6]}"
    fake_gcp.tpu.create_node(FakeNode(name=node, zone=ZONE, accelerator_type="v3-8", runtime="x", mode="vm",
                                      labels={"tpuops-cluster": cluster}))
    env = {**fake_gcp.env, "GCE_METADATA_HOST": metadata.host, "TPUOPS_AUTOSTOP_TICK": "0.2"}
    config = agent_config(cluster=cluster, provider="gcp", project=PROJECT, zone=ZONE, node=node, queued=None,
                          setting=AutostopSpec(idle="3s"), created_at=time.time(), bucket=None,
                          device_glob="~/dev/accel*", env=env)
    runner = ssh_runner(sshd_worker, tmp_path)
    try:
        installed = install_on_worker0(runner, config)
        assert installed.started, installed.error
        runner.close()  # the SSH session ends; the agent must not
        runner = ssh_runner(sshd_worker, tmp_path)
        assert read_agent(runner, cluster).running
        wait_for("the idle TPU to be deleted", lambda: fake_gcp.tpu.get_node(ZONE, node, "vm") is None)
        assert all(r.headers.get("metadata-flavor") == "Google" for r in metadata.token_requests())
        log = sshd_worker.workers[0].home / "tpuops" / cluster / "autostop.log"
        # The agent logs the deletion once the API answered, a moment after the node is gone.
        wait_for("the agent to log the deletion", lambda: json.loads(log.read_text().splitlines()[-1])["action"]
                 == "deleted")
    finally:
        stop_agent(runner, cluster, keep_alive=False)
        runner.close()
        metadata.stop()


def test_a_new_idle_time_keeps_the_hard_cap_and_off_turns_everything_off() -> None:
    from tpuops.ops.autostop import parse_setting, with_idle

    current = AutostopSpec(idle="30m", max_hours=12)
    assert with_idle(current, parse_setting("2h")) == AutostopSpec(idle="2h", max_hours=12)
    off = with_idle(current, parse_setting("off"))
    assert off == AutostopSpec() and not off.enabled
