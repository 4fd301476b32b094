"""Small pure pieces of the GCP provider: error translation, key pinning, durations, endpoints."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc

from tpuops import keys
from tpuops.cloud.gcp.clients import Endpoints, base_url
from tpuops.cloud.gcp.errors import translate
from tpuops.durations import parse_duration
from tpuops.errors import CapacityError, CloudError, TransientError, UsageError


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (gexc.TooManyRequests("slow down"), TransientError),
        (gexc.InternalServerError("oops"), TransientError),
        (gexc.ServiceUnavailable("later"), TransientError),
        (gexc.DeadlineExceeded("late"), TransientError),
        (gexc.BadRequest("bad"), CloudError),
        (gexc.NotFound("gone"), CloudError),
        (gexc.Conflict("taken"), CloudError),
        (gexc.ServiceUnavailable('There is no more capacity in the zone "z"'), CapacityError),
    ],
)
def test_call_errors_are_retried_only_when_transient(error: Exception, kind: type) -> None:
    translated = translate(error, "create TPU x", "tpu")
    assert type(translated) is kind


def test_resource_exhausted_is_capacity_on_an_operation_but_rate_limit_on_a_call() -> None:
    failure = gexc.from_grpc_status(8, "out of TPUs")
    assert type(translate(failure, "create", "tpu", from_operation=True)) is CapacityError
    assert type(translate(failure, "create", "tpu")) is TransientError


def test_forbidden_names_the_api_to_enable_or_the_permission() -> None:
    disabled = translate(gexc.Forbidden("Compute Engine API has not been used in project 1"), "get VM", "compute")
    assert disabled.message == "get VM: the compute.googleapis.com API is not enabled"
    assert disabled.hint == "run `gcloud services enable compute.googleapis.com`"
    denied = translate(gexc.Forbidden("Permission 'tpu.nodes.create' denied"), "create TPU x", "tpu")
    assert denied.message == "create TPU x: permission denied: Permission 'tpu.nodes.create' denied"


def test_rest_urls_are_dropped_from_messages() -> None:
    error = gexc.NotFound("GET https://tpu.googleapis.com/v2/projects/p/locations/z/nodes/n?x=1: Node n not found")
    assert translate(error, "get TPU n", "tpu").message == "get TPU n: not found: Node n not found"


def test_key_pair_is_generated_once_and_private(tmp_path: Path) -> None:
    first = keys.ensure_key_pair(tmp_path / "c", "c")
    assert stat.S_IMODE(first.private_path.stat().st_mode) == 0o600
    assert first.public_key.startswith("ssh-ed25519 ") and first.public_key.endswith(" tpuops-c")
    assert keys.ensure_key_pair(tmp_path / "c", "c") == first
    user_line = keys.ssh_keys_metadata("ada", first)
    assert user_line == f"ada:ssh-ed25519 {first.public_key.split()[1]} ada"


def test_pinning_replaces_a_hosts_old_key_and_keeps_other_lines(tmp_path: Path) -> None:
    keys.pin_host_keys(
        tmp_path,
        [
            keys.PinnedKey("127.0.0.10", 22, "ssh-ed25519", "OLD"),
            keys.PinnedKey("127.0.0.11", 2222, "ssh-ed25519", "KEEP"),
        ],
    )
    (tmp_path / "known_hosts").write_text((tmp_path / "known_hosts").read_text() + "127.0.0.99 ssh-rsa TOFU\n")
    keys.pin_host_keys(tmp_path, [keys.PinnedKey("127.0.0.10", 22, "ssh-ed25519", "NEW")])
    assert (tmp_path / "known_hosts").read_text().splitlines() == [
        "[127.0.0.11]:2222 ssh-ed25519 KEEP",
        "127.0.0.99 ssh-rsa TOFU",
        "127.0.0.10 ssh-ed25519 NEW",
    ]


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("0", 0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1d", "-5m", "m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(text)


def test_endpoint_overrides_keep_scheme_host_and_port() -> None:
    assert base_url("https://compute.googleapis.com/compute/v1/") == "https://compute.googleapis.com"
    assert base_url("127.0.0.1:9023") == "http://127.0.0.1:9023"
    endpoints = Endpoints.from_env({"CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": "http://127.0.0.1:8080/"})
    assert endpoints.tpu == "http://127.0.0.1:8080" and endpoints.any_override
    assert not Endpoints.from_env({}).any_override
