"""What `up`, `push`, `run` and `launch` tell a user while they work (in a pipe: one line per step), and the one
JSON convention every --json follows. The local provider, through the real CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec


@pytest.fixture
def two_workers(tmp_path: Path, tpuops_home: Path) -> Path:
    """A 2-worker local cluster's spec: a one-file code dir, a data dir pushed to the workers, a bucket."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hello')\n" * 500)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("text\n" * 100)
    return write_spec(tmp_path, """
        name: chatty
        provider: local
        tpu: {type: v2-8, workers: 2}
        bucket: {name: chatty-data}
        code: {path: code}
        data:
          - {from: corpus, to: corpus}
        trainer:
          framework: jax
          command: echo "trained on $TPUOPS_WORKER_ID"
        """)


def test_run_in_a_pipe_says_what_up_created_and_kept_and_counts_workers_once(two_workers: Path) -> None:
    first = run_cli("run", str(two_workers), "--project", "p", "--yes", timeout=180)
    assert first.returncode == 0, first.stderr
    err = first.stderr
    assert err.index("==> up") < err.index("  tpu chatty: planned: create") < err.index("==> launch")
    assert "  bucket chatty-data: planned: create" in err and "  tpu chatty: READY in local" in err
    # code and data are two trees on the same 2 workers: 2 workers, each with its bytes
    push = next(line for line in err.splitlines() if line.startswith("push:"))
    assert re.fullmatch(r"push: ok on 2 workers \(w0 [\d.]+ (B|KiB), w1 [\d.]+ (B|KiB) sent\)", push), push
    assert err.index("==> launch") < err.index("  push w0: sent ") < err.index("push: ok")  # each worker's line
    assert "4 worker" not in err

    again = run_cli("run", str(two_workers), timeout=180)
    assert again.returncode == 0, again.stderr
    assert "  tpu chatty: planned: keep" in again.stderr and "  bucket chatty-data: planned: keep" in again.stderr
    assert "push: ok on 2 workers (nothing changed)" in again.stderr
    assert "[scalars] ." not in again.stdout


def test_push_and_launch_output(two_workers: Path) -> None:
    assert run_cli("up", str(two_workers)).returncode == 0
    assert run_cli("push", "chatty").returncode == 0
    (two_workers.parent / "code" / "more.py").write_text("x = 1\n")
    pushed = run_cli("push", "chatty")
    assert pushed.returncode == 0, pushed.stderr
    lines = pushed.stdout.splitlines()
    assert re.match(r"~/tpuops/chatty/code: 2 files \(.+\), 1 changed, .+ sent from here \(sent: w0, w1\)",
                    lines[0]), lines
    assert re.fullmatch(r"  w0: [\d.]+ (B|KiB) sent in [\d.]+ s", lines[1]), lines  # each worker's bytes
    assert re.fullmatch(r"  w1: [\d.]+ (B|KiB) sent in [\d.]+ s", lines[2]), lines
    assert re.match(r"corpus: 1 file \(.+\), 0 changed, 0 B sent from here \(unchanged: w0, w1\)$", lines[3])
    assert len(lines) == 4  # unchanged workers take no line of their own

    launched = run_cli("launch", "chatty")
    assert launched.returncode == 0, launched.stderr
    assert "Follow its output: tpuops logs chatty --workers -f" in launched.stdout
    assert "tpuops launch --follow" not in launched.stdout
    followed = run_cli("logs", "chatty", "--workers", "-f", timeout=60)
    assert followed.returncode == 0 and "[w1] trained on 1" in followed.stdout


def test_status_list_has_a_header(two_workers: Path) -> None:
    assert run_cli("up", str(two_workers)).returncode == 0
    listed = run_cli("status").stdout.splitlines()
    assert listed[0].split()[:4] == ["NAME", "PROVIDER", "ZONE", "WORKERS"]
    assert listed[1].split()[:4] == ["chatty", "local", "local", "2"]


def test_reversed_worker_range_is_named(two_workers: Path) -> None:
    assert run_cli("up", str(two_workers)).returncode == 0
    result = run_cli("exec", "chatty", "--worker", "1-0", "--", "true")
    assert result.returncode == 2
    assert result.stderr.strip() == ("tpuops: error: --worker 1-0: the range is reversed "
                                     "(hint: write it low to high: 0-1)")


def test_every_json_output_is_one_document_from_the_results(two_workers: Path) -> None:
    """One convention: each --json prints one JSON value built from the result's as_dict()."""
    documents = {}
    for args in (["plan", str(two_workers)], ["up", str(two_workers)], ["status"], ["status", "chatty"],
                 ["push", "chatty"], ["exec", "chatty", "--", "echo hi"], ["launch", "chatty"],
                 ["stop", "chatty"], ["run", str(two_workers)], ["down", "chatty", "--yes"]):
        result = run_cli(args[0], "--json", *args[1:], timeout=180)
        assert result.returncode == 0, (args, result.stderr)
        documents[args[0] if args[0] != "status" or len(args) == 1 else "status NAME"] = json.loads(result.stdout)
    assert documents["plan"]["cluster"] == "chatty" and documents["plan"]["actions"]
    assert {"created", "kept", "workers", "warnings"} <= documents["up"].keys()
    assert [c["name"] for c in documents["status"]] == ["chatty"]
    assert documents["status NAME"]["workers"][0]["index"] == 0
    assert documents["exec"]["workers"][0]["stdout"] == "hi\n"
    assert documents["launch"]["ok"] and documents["stop"]["run_id"] == documents["launch"]["run_id"]
    assert documents["run"]["exit_code"] == 0
    assert documents["down"]["where"] and documents["down"]["deleted"]


def test_push_in_a_pipe_gives_each_worker_a_line_with_bytes_and_rate(two_workers: Path) -> None:
    assert run_cli("up", str(two_workers)).returncode == 0
    pushed = run_cli("push", "chatty")
    assert pushed.returncode == 0, pushed.stderr
    lines = [line for line in pushed.stderr.splitlines() if line.startswith("  push ")]
    assert [line.split(":")[0] for line in lines] == ["  push w0", "  push w1"], pushed.stderr
    for line in lines:  # code and data together: one line per worker
        assert re.fullmatch(r"  push w\d: sent [\d.]+ KiB in [\d.]+ s \([\d.]+ (B|KiB|MiB)/s\)", line), line
    assert "?" not in pushed.stderr
    again = run_cli("push", "chatty")
    assert [line for line in again.stderr.splitlines() if line.startswith("  push ")] == \
        ["  push w0: unchanged", "  push w1: unchanged"]


def test_push_on_a_terminal_shows_bytes_of_their_total_and_the_rate_as_they_move(two_workers: Path,
                                                                               tmp_path: Path) -> None:
    """Held mid-way (the workers' tar waits for a file), the live table must already show the bytes sent of a
    total known in advance, and a rate; then the push completes."""
    import os
    import pty
    import subprocess
    import sys
    import threading
    import time

    from tests.test_push_leftovers import held_tar

    (two_workers.parent / "code" / "weights.bin").write_bytes(os.urandom(6 * 1024 * 1024))
    assert run_cli("up", str(two_workers)).returncode == 0
    env, go = held_tar(tmp_path)
    main, secondary = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "tpuops", "push", "chatty", "--code-only"],
                               env={**os.environ, **env, "COLUMNS": "120", "TERM": "xterm"},
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    seen: list[bytes] = []

    def read_terminal() -> None:  # always drained, so the CLI never blocks on a full terminal
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the CLI ended and closed its end
                return
            if not chunk:
                return
            seen.append(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    moving = re.compile(r"w0 +~/tpuops/chatty/code +sending +[\d.]+ (B|KiB|MiB) / 6\.0 MiB +[\d.]+ (KiB|MiB)/s")
    try:
        deadline = time.monotonic() + 60
        while not moving.search(b"".join(seen).decode("utf-8", "replace")) and time.monotonic() < deadline:
            time.sleep(0.1)
        go.touch()
        out, _ = process.communicate(timeout=60)
    finally:
        go.touch()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        reader.join(timeout=10)
        os.close(main)
    text = b"".join(seen).decode("utf-8", "replace")
    assert moving.search(text), text[-3000:]
    assert "/?" not in text and "/ ?" not in text  # the total is known before the first byte
    assert process.returncode == 0, text[-3000:]
    assert out.decode().startswith("~/tpuops/chatty/code: 2 files"), out
