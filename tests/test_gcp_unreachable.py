"""Offline: every command that talks to Google gives up on an endpoint that does not answer after one deadline
(TPUOPS_API_DEADLINE), with the same one line, whether nobody listens there (refused) or a socket accepts and
never answers (a blackhole). Before, `status NAME` and `down NAME` sat silent for two minutes, and a blackhole
hung them for good."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tpuops.cloud.gcp.deadline import ApiDeadline
from tpuops.errors import UnreachableError

LINE = re.compile(r"^tpuops: error: cannot reach the Google Cloud (tpu|compute|storage) API at 127\.0\.0\.1:\d+ "
                  r"for \d+s \(.+: (connection refused|timed out: no answer)\) \(hint: check the network connection "
                  r"\(DNS, proxy, VPN\) or the CLOUDSDK_API_ENDPOINT_OVERRIDES_\* endpoints; "
                  r"TPUOPS_API_DEADLINE=SECONDS waits longer\)$")


@pytest.fixture(scope="module")
def blackhole() -> Iterator[int]:
    """A port whose socket listens (the kernel completes every connection) but never accepts nor answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def env_for(port: int, home: Path, deadline: int = 2) -> dict[str, str]:
    where = f"http://127.0.0.1:{port}"
    return {"CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": where, "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": where,
            "STORAGE_EMULATOR_HOST": where, "TPUOPS_TPU_V1_GRPC_ENDPOINT": f"127.0.0.1:{port}",
            "GOOGLE_CLOUD_PROJECT": "p", "TPUOPS_API_DEADLINE": str(deadline), "TPUOPS_HOME": str(home)}


COMMANDS = {
    "status-zone": ("status", "gone", "--zone", "europe-west4-a"),
    "down-zone": ("down", "gone", "--zone", "europe-west4-a", "--yes"),
    "down-everywhere": ("down", "gone", "--yes"),
    "up": ("up", "{spec}"),
    "logs": ("logs", "--logdir", "gs://some-bucket/runs"),
}


@pytest.mark.parametrize(("kind", "command"), [
    ("refused", "status-zone"), ("refused", "down-everywhere"), ("refused", "up"),
    ("blackhole", "status-zone"), ("blackhole", "down-zone"), ("blackhole", "logs"),
])
def test_an_endpoint_that_does_not_answer_fails_every_command_in_one_line(
        kind: str, command: str, blackhole: int, refused_port: int, tmp_path: Path) -> None:
    port = blackhole if kind == "blackhole" else refused_port
    (tmp_path / "project").mkdir()
    spec = write_spec(tmp_path / "project", """
        name: gone
        zone: europe-west4-a
        tpu: {type: v3-8, runtime: tpu-vm-tf-2.16.1-pjrt}
        """)
    args = [arg.format(spec=spec) for arg in COMMANDS[command]]
    # gRPC tries a refusing endpoint again until the deadline and says why it last failed: 6 s leave a loaded
    # machine time to see a refusal before the end (2 s once ran out first); a silent socket is waited for 2 s.
    deadline = 6 if kind == "refused" else 2
    result = run_cli(*args, env=env_for(port, tmp_path / "home", deadline), timeout=90)  # unguarded: for good
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and LINE.match(lines[0]) and f" for {deadline}s (" in lines[0], result.stderr
    assert ("connection refused" in lines[0]) == (kind == "refused")


def test_an_answer_restarts_the_clock_and_a_silent_api_is_tried_once_more_not_forever() -> None:
    now = [0.0]
    deadline = ApiDeadline(10.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    calls: list[str] = []

    def refused() -> str:
        calls.append("refused")
        raise ConnectionRefusedError("Connection refused")

    with pytest.raises(UnreachableError, match="for 10s .*connection refused"):
        deadline.run(refused, "list TPUs", "test-api", bounded=False)
    assert len(calls) > 3 and now[0] >= 10.0  # retried for the whole deadline
    calls.clear()
    with pytest.raises(UnreachableError):
        deadline.run(refused, "get TPU", "test-api", bounded=False)
    assert calls == ["refused"]  # still silent: one more try, then the line at once
    assert deadline.run(lambda: "answer", "get TPU", "test-api", bounded=False) == "answer"
    with pytest.raises(ValueError):  # an answer, even an error, is not silence: no retry here
        deadline.run(lambda: (_ for _ in ()).throw(ValueError("400")), "get TPU", "test-api", bounded=False)
