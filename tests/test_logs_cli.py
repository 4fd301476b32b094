"""`tpuops logs` as users run it (a subprocess): table, JSON, filters, chart, PNG, mirror, follow while a
writer appends (local directory and gcp-storage-emulator), logdir from a cluster's spec, and the errors."""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.gcs_emulator import GcsEmulator, gcs_emulator  # noqa: F401  (pytest fixture)
from tests.helpers import run_cli, write_spec
from tests.logs_writers import TbWriter, event_file_name, f32, framed, simple_event
from tpuops.state import ClusterState, StateStore

LINE_TIMEOUT_S = 30.0


def write_runs(logdir: Path) -> None:
    for run, scale in (("train", 1.0), ("eval", 2.0)):
        writer = TbWriter(logdir / run)
        for step in range(10):
            writer.event(simple_event(step * 100, {"loss": scale / (step + 1), "lr": 0.01}))
        writer.close()


def upload_tree(gcs: GcsEmulator, bucket: str, local: Path, prefix: str) -> None:
    handle = gcs.client().bucket(bucket)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            handle.blob(f"{prefix}/{path.relative_to(local).as_posix()}").upload_from_filename(str(path))


def test_table_of_latest_values(tmp_path: Path) -> None:
    write_runs(tmp_path)
    result = run_cli("logs", "--logdir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0][:4] == ["RUN", "TAG", "STEP", "VALUE"]
    assert [row[:4] for row in rows[1:]] == [
        ["eval", "loss", "900", "0.2"], ["eval", "lr", "900", "0.01"],
        ["train", "loss", "900", "0.1"], ["train", "lr", "900", "0.01"],
    ]
    assert all(row[-1] == "10" for row in rows[1:])  # points per series


RUN_ID = "20261127-101218-c5ef"


def write_a_run_with_long_tags(logdir: Path, runs: tuple[str, ...] = (RUN_ID,)) -> None:
    """What a trainer run by tpuops leaves: a run-id directory, tags longer than a column's share of 80."""
    for run in runs:
        writer = TbWriter(logdir / run)
        for step in range(0, 1001, 100):
            writer.event(simple_event(step, {"learning_rate": 0.0003, "eval_loss_smoothed": 2.3131,
                                             "tokens_per_sec": 23610.5}))
        writer.close()


def test_a_pipe_gets_every_name_and_value_whole_whatever_the_width(tmp_path: Path) -> None:
    """`tpuops logs NAME | grep learning_rate`: nothing cut to 80 columns (nor to COLUMNS)."""
    write_a_run_with_long_tags(tmp_path)
    for columns in ("", "40"):
        result = run_cli("logs", "--logdir", str(tmp_path), env={"COLUMNS": columns})
        assert result.returncode == 0, result.stderr
        assert "…" not in result.stdout, result.stdout
        rows = [line.split() for line in result.stdout.splitlines()]
        assert rows[0] == ["RUN", "TAG", "STEP", "VALUE", "TIME", "(UTC)", "POINTS"], result.stdout
        assert [row[:4] for row in rows[1:]] == [[RUN_ID, "eval_loss_smoothed", "1000", "2.3131"],
                                                 [RUN_ID, "learning_rate", "1000", "0.0003"],
                                                 [RUN_ID, "tokens_per_sec", "1000", "23610.5"]], result.stdout


@pytest.mark.parametrize(("columns", "env", "runs", "headers"), [
    (80, {}, (RUN_ID,), ["RUN", "TAG", "STEP", "VALUE", "TIME", "(UTC)"]),
    (45, {}, (RUN_ID,), ["TAG", "STEP", "VALUE"]),
    (100, {"COLUMNS": "45"}, (RUN_ID,), ["TAG", "STEP", "VALUE"]),
    (60, {}, (RUN_ID, "20261127-121218-d6f0"), ["RUN", "TAG", "STEP", "VALUE"]),  # two runs: the run stays
], ids=["80-columns", "45-columns", "COLUMNS-45", "two-runs-in-60"])
def test_a_narrow_terminal_loses_columns_before_a_name_or_value_is_cut(
        tmp_path: Path, columns: int, env: dict[str, str], runs: tuple[str, ...], headers: list[str]) -> None:
    from tests.test_logs_plot_screen import ANSI, run_in_pty

    write_a_run_with_long_tags(tmp_path, runs)
    code, out = run_in_pty(["logs", "--logdir", str(tmp_path)], columns=columns, env=env)
    assert code == 0, out
    lines = [line.rstrip() for line in ANSI.sub("", out).replace("\r", "").splitlines() if line.strip()]
    assert "…" not in out and lines[0].split() == headers, out
    rows = [line.split() for line in lines[1:]]
    tag = headers.index("TAG")
    expected = [["eval_loss_smoothed", "1000", "2.3131"], ["learning_rate", "1000", "0.0003"],
                ["tokens_per_sec", "1000", "23610.5"]] * len(runs)
    assert [row[tag:tag + 3] for row in rows] == expected, out
    assert all(len(line) <= int(env.get("COLUMNS", columns)) for line in lines), out


def test_json_points_equal_what_was_written_with_filters(tmp_path: Path) -> None:
    write_runs(tmp_path)
    result = run_cli("logs", "--logdir", str(tmp_path), "--json", "--tag", "^loss$", "--run", "train",
                     "--since", "500")
    assert result.returncode == 0, result.stderr
    points = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(p["run"], p["tag"], p["step"], p["value"]) for p in points] == [
        ("train", "loss", step * 100, f32(1.0 / (step + 1))) for step in range(5, 10)
    ]


def test_gcs_logdir_from_the_clusters_spec(tmp_path: Path, gcs_emulator: GcsEmulator) -> None:  # noqa: F811
    bucket = gcs_emulator.new_bucket()
    write_runs(tmp_path / "local")
    upload_tree(gcs_emulator, bucket, tmp_path / "local", "tb")
    spec = write_spec(tmp_path, f"""
        name: bert
        zone: europe-west4-a
        project: p
        tpu:
          type: v3-8
          runtime: tpu-vm-tf-2.16.1-pjrt
        logs:
          tensorboard: gs://{bucket}/tb
        """)
    StateStore(Path(os.environ["TPUOPS_HOME"])).save(
        ClusterState(name="bert", provider="gcp", zone="europe-west4-a", spec_path=str(spec)))
    for args in (("logs", "bert", "--json"), ("logs", "--json")):  # named, and the only cluster here
        result = run_cli(*args, env=gcs_emulator.env)
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.splitlines()) == 40


def test_plot_and_png(tmp_path: Path) -> None:
    write_runs(tmp_path / "logs")
    result = run_cli("logs", "--logdir", str(tmp_path / "logs"), "--plot", "--tag", "loss")
    assert result.returncode == 0, result.stderr
    assert "loss" in result.stdout and "step" in result.stdout and "train" in result.stdout
    pytest.importorskip("matplotlib")
    png = tmp_path / "curves.png"
    result = run_cli("logs", "--logdir", str(tmp_path / "logs"), "--png", str(png))
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_download_mirrors_incrementally(tmp_path: Path, gcs_emulator: GcsEmulator) -> None:  # noqa: F811
    bucket = gcs_emulator.new_bucket()
    local = tmp_path / "writer"
    writer = TbWriter(local / "train")
    writer.scalars(range(5))
    upload_tree(gcs_emulator, bucket, local, "tb")
    mirror = tmp_path / "mirror"
    first = run_cli("logs", "--logdir", f"gs://{bucket}/tb", "--download", str(mirror), env=gcs_emulator.env)
    assert first.returncode == 0, first.stderr
    copy = mirror / "train" / writer.path.name
    assert copy.read_bytes() == writer.path.read_bytes()
    assert f"mirrored {writer.path.stat().st_size} bytes" in first.stderr
    size_before = writer.path.stat().st_size
    writer.scalars(range(5, 8))
    writer.close()
    upload_tree(gcs_emulator, bucket, local, "tb")
    second = run_cli("logs", "--logdir", f"gs://{bucket}/tb", "--download", str(mirror), "--json",
                     env=gcs_emulator.env)
    assert second.returncode == 0, second.stderr
    assert f"mirrored {writer.path.stat().st_size - size_before} bytes" in second.stderr  # only the new part
    assert copy.read_bytes() == writer.path.read_bytes()
    assert [json.loads(line)["step"] for line in second.stdout.splitlines()] == list(range(8))


class LineReader:
    """Lines of a subprocess's stdout, read by a thread so every wait can have a timeout."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(process,), daemon=True)
        self._thread.start()

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self) -> str:
        line = self.lines.get(timeout=LINE_TIMEOUT_S)
        assert line is not None, "the command ended early"
        return line


def start_follow(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tpuops", "logs", "-f", "--interval", "0.05",
                             "--max-interval", "0.2", *args],
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("where", ["dir", "gcs"])
def test_follow_prints_new_points_while_a_writer_appends(where: str, tmp_path: Path,
                                                         request: pytest.FixtureRequest) -> None:
    local = tmp_path / "writer"
    writer = TbWriter(local / "train")
    writer.scalars(range(3))
    env: dict[str, str] = {}
    logdir = str(local)
    publish = lambda: None  # noqa: E731  the follower reads the writer's directory itself
    if where == "gcs":
        gcs: GcsEmulator = request.getfixturevalue("gcs_emulator")
        bucket = gcs.new_bucket()
        env, logdir = gcs.env, f"gs://{bucket}/tb"
        publish = lambda: upload_tree(gcs, bucket, local, "tb")  # noqa: E731
    publish()
    process = start_follow(["--logdir", logdir], env)
    try:
        reader = LineReader(process)
        assert reader.next().split() == ["train", "loss", "2", f"{1 / 3:.6g}"]  # the latest point first
        writer.scalars(range(3, 6))
        publish()
        assert [reader.next().split()[2] for _ in range(3)] == ["3", "4", "5"]
        process.send_signal(signal.SIGINT)  # Ctrl-C ends a follow, quietly
        assert process.wait(timeout=LINE_TIMEOUT_S) == 0
    finally:
        writer.close()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=LINE_TIMEOUT_S)
        if process.stdout:
            process.stdout.close()
        if process.stderr:
            process.stderr.close()


def test_follow_until_idle_ends_by_itself_with_since(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / event_file_name()).write_bytes(framed(*(simple_event(s, {"x": float(s)}) for s in range(4))))
    result = run_cli("logs", "--logdir", str(tmp_path), "-f", "--since", "2", "--json", "--interval", "0.05",
                     "--until-idle", "0.3", timeout=60)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["step"] for line in result.stdout.splitlines()] == [2, 3]


def test_corrupt_record_warns_on_stderr_and_goes_on(tmp_path: Path) -> None:
    good = [framed(simple_event(s, {"x": 1.0})) for s in range(3)]
    bad = bytearray(good[1])
    bad[20] ^= 0x55
    name = tmp_path / "run" / event_file_name()
    name.parent.mkdir()
    name.write_bytes(good[0] + bytes(bad) + good[2])
    result = run_cli("logs", "--logdir", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["step"] for line in result.stdout.splitlines()] == [0, 2]
    assert f"tpuops: warning: skipping corrupt record in {name} at offset {len(good[0])}" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--logdir", "/nonexistent/logdir"], "logdir /nonexistent/logdir does not exist"),
        (["--logdir", "s3://bucket/x"], "unsupported storage URL scheme s3://"),
        (["--logdir", "gs://"], "names no bucket"),
        ([], "no clusters here (hint: create one with `tpuops up SPEC`, or pass --logdir"),
        (["ghost"], "no cluster named 'ghost'"),
        (["--logdir", ".", "--until-idle", "3"], "--until-idle only applies with --follow"),
        (["--logdir", ".", "--tag", "("], "bad --tag regular expression"),
    ],
)
def test_bad_input_is_one_line_with_a_hint(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_cli("logs", *args, cwd=tmp_path)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "hint:" in lines[0], result.stderr


def test_no_event_files_and_no_matching_scalars(tmp_path: Path) -> None:
    empty = run_cli("logs", "--logdir", str(tmp_path))
    assert empty.returncode == 1 and "no TensorBoard event files under" in empty.stderr
    write_runs(tmp_path)
    nothing = run_cli("logs", "--logdir", str(tmp_path), "--tag", "accuracy")
    assert nothing.returncode == 1 and "match the filters" in nothing.stderr


def test_follow_with_plot_and_png_redraws_then_ends_when_idle(tmp_path: Path) -> None:
    write_runs(tmp_path / "logs")
    png = tmp_path / "live.png"
    args = ["logs", "--logdir", str(tmp_path / "logs"), "-f", "--plot", "--tag", "^loss$", "--interval", "0.05",
            "--until-idle", "0.3"]
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    result = run_cli(*args, *(["--png", str(png)] if has_matplotlib else []), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "loss" in result.stdout and "train" in result.stdout and "eval" in result.stdout
    assert "\x1b[2J" not in result.stdout  # not a terminal: charts follow each other, no screen clearing
    if has_matplotlib:
        assert png.read_bytes()[:4] == b"\x89PNG"
