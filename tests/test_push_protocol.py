"""The push protocol's shared pieces: the client's decision after each exit code, and the agent as shipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tpuops.remote.manifest import FileEntry, Manifest
from tpuops.remote.push_ship import AGENT_SOURCE
from tpuops.shipped import push_protocol as protocol
from tpuops.shipped import script_command


@pytest.mark.parametrize(("exit_code", "base", "fetched", "step"), [
    (0, "abc", False, protocol.DONE),
    (0, None, True, protocol.DONE),
    (protocol.EXIT_BASE_UNUSABLE, "abc", False, protocol.RESEND_FULL),  # a delta refused: send everything
    (protocol.EXIT_BASE_UNUSABLE, None, False, protocol.FAILED),  # everything refused: resending cannot help
    (protocol.EXIT_FETCH_FAILED, "abc", True, protocol.SEND_DIRECT),  # relay unreachable: copy directly
    (protocol.EXIT_BASE_UNUSABLE, "abc", True, protocol.SEND_DIRECT),  # the direct copy then resends in full
    (protocol.EXIT_BASE_UNUSABLE, None, True, protocol.SEND_DIRECT),
    (protocol.EXIT_FETCH_FAILED, "abc", False, protocol.FAILED),
    (protocol.EXIT_DISK, "abc", True, protocol.FAILED),
    (protocol.EXIT_NOT_OURS, None, False, protocol.FAILED),
    (protocol.EXIT_CORRUPT, "abc", False, protocol.FAILED),
    (None, "abc", True, protocol.FAILED),  # SSH itself failed: no exit code
])
def test_after_apply(exit_code: int | None, base: str | None, fetched: bool, step: str) -> None:
    assert protocol.after_apply(exit_code, base, fetched) == step


def test_client_manifest_uses_the_protocol_format() -> None:
    manifest = Manifest((FileEntry("a.py", 3, 0o644, "d" * 64), FileEntry("l", 0, 0o644, "", "a.py")))
    rows = [["a.py", 3, 0o644, "d" * 64, None], ["l", 0, 0o644, "", "a.py"]]
    assert manifest.text == protocol.manifest_text(rows)
    assert manifest.tree_id == protocol.tree_id(protocol.manifest_text(rows))
    assert len(manifest.tree_id) == protocol.TREE_ID_CHARS


def test_shipped_agent_carries_the_protocol_and_runs_without_tpuops(tmp_path) -> None:
    """The worker has no tpuops: the shipped text must not import it, and must run with -I (no site, no cwd)."""
    assert "from tpuops" not in AGENT_SOURCE and "def after_apply" in AGENT_SOURCE
    (tmp_path / "taken").write_text("x")
    done = subprocess.run([sys.executable, "-I", "-c", AGENT_SOURCE, "apply", str(tmp_path / "taken"), "-", "0" * 24],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert done.returncode == protocol.EXIT_NOT_OURS and "not created by tpuops push" in done.stderr


def test_push_state_names_the_tree_a_destination_holds(tmp_path) -> None:
    """What the agent's apply checks, push_state.sh answers first, without starting Python."""
    def state(dest: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(script_command("push_state", dest), capture_output=True, text=True, timeout=60,
                              cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})

    assert state("~/code").stdout == '{"tree": null}\n'
    (tmp_path / "code").mkdir()
    assert state("~/code").stdout == '{"tree": null}\n'  # an empty directory is taken over
    tree = "0123456789abcdef01234567"
    (tmp_path / ".tpuops-trees" / "code" / tree).mkdir(parents=True)
    (tmp_path / "code").rmdir()
    (tmp_path / "code").symlink_to(f".tpuops-trees/code/{tree}")
    assert json.loads(state("~/code").stdout) == {"tree": tree}
    assert json.loads(state(str(tmp_path / "code")).stdout) == {"tree": tree}
    (tmp_path / ".tpuops-trees" / "code" / tree).rmdir()
    assert state("~/code").stdout == '{"tree": null}\n'  # its tree is gone
    (tmp_path / "taken").write_text("x")
    done = state("~/taken")
    assert done.returncode == protocol.EXIT_NOT_OURS and "not created by tpuops push" in done.stderr
