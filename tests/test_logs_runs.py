"""Scalars belong to a run: `logs` shows the cluster's current run, `--run ID|all` chooses, the run column says
which; event files are assigned to launches by the time their writer created them (or by a run-id directory)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.test_quickstart import long_quickstart
from tpuops.cloud.blob_types import BlobInfo
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.logs.runs import CLOCK_SLACK, EARLIER, Launch, choose, launch_time
from tpuops.ops.logs import run_map
from tpuops.ops.run_control import record_run
from tpuops.state import ClusterState, RunRecord

FIRST, SECOND, RESUMED = "20261125-100000-aaaa", "20261125-110000-bbbb", "20261125-120000-cccc"
LAUNCHES = [Launch(FIRST, 0), Launch(SECOND, 0), Launch(RESUMED, 1)]


def event_file(name_dir: str, at: float, updated: float | None = None) -> BlobInfo:
    prefix = f"{name_dir}/" if name_dir else ""
    return BlobInfo(f"{prefix}events.out.tfevents.{int(at)}.host.123.0", 10, None, updated)


def test_files_of_a_fixed_path_go_to_the_launch_before_their_creation() -> None:
    runs = choose(LAUNCHES, "all", "c")
    first = launch_time(FIRST)
    assert runs.label(event_file("", first - 3600)) == EARLIER
    assert runs.label(event_file("", first + 5)) == FIRST
    assert runs.label(event_file("", first - 1)) == FIRST  # a worker clock a second behind
    assert runs.label(event_file("train", launch_time(SECOND) + 60)) == f"{SECOND}/train"
    assert runs.label(event_file("", launch_time(RESUMED) + 1)) == RESUMED
    # no time in the name: the store's time decides
    assert runs.label(BlobInfo("custom.tfevents", 1, None, launch_time(SECOND) + 9)) == SECOND


def test_a_run_id_directory_wins_over_the_time() -> None:
    runs = choose(LAUNCHES, "all", "c")
    assert runs.label(event_file(FIRST, launch_time(RESUMED) + 60)) == FIRST
    assert runs.label(event_file(f"{FIRST}/eval", 0)) == f"{FIRST}/eval"


def test_the_default_is_the_current_run_with_its_resumes() -> None:
    runs = choose(LAUNCHES, None, "c")
    assert runs.chosen == {SECOND, RESUMED}
    assert runs.label(event_file("", launch_time(FIRST) + 5)) is None
    assert runs.label(event_file("", launch_time(SECOND) + 5)) == SECOND


def test_a_run_is_chosen_by_id_or_unique_prefix() -> None:
    assert choose(LAUNCHES, "20261125-10", "c").chosen == {FIRST}
    assert choose(LAUNCHES, SECOND, "c").chosen == {SECOND}
    with pytest.raises(UsageError, match="matches several runs"):
        choose(LAUNCHES, "20261125", "c")
    with pytest.raises(UsageError, match="is no run of cluster 'c'") as caught:
        choose(LAUNCHES, "train", "c")
    assert FIRST in (caught.value.hint or "") and "--run all" in (caught.value.hint or "")


def test_a_reader_opened_before_a_launch_gives_its_files_to_that_launch(tmp_path: Path, tpuops_home: Path) -> None:
    """`run` opens its reader before it launches; a `logs -f` may be left open across a launch."""
    ctx = Context.from_env()
    ctx.store.save(ClusterState(name="c", provider="local", zone="local", spec_path=str(tmp_path / "c.yaml"),
                                runs=[RunRecord(id=FIRST, command="train")]))
    current, named = run_map(ctx, "c", None, None), run_map(ctx, "c", None, FIRST[:-2])
    assert current is not None and named is not None
    assert current.label(event_file("", launch_time(FIRST) + 5)) == FIRST
    now = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-dddd"
    record_run(ctx, "c", RunRecord(id=now, command="train"))
    assert current.label(event_file("", launch_time(now) + 1)) == now
    assert current.chosen == {now}
    assert named.label(event_file("", launch_time(now) + 2)) is None  # --run FIRST stays FIRST alone
    assert named.label(event_file("", launch_time(FIRST) + 5)) == FIRST


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, dict[str, str], str]]:
    """The quickstart (100 steps) run twice on the local provider, in its own TPUOPS_HOME: the two run ids, the
    environment, and what the second `run` printed (as a user reads it, not --json)."""
    home = tmp_path_factory.mktemp("two-runs-home")
    spec = long_quickstart(tmp_path_factory.mktemp("two-runs"), steps=100)
    env = {"TPUOPS_HOME": str(home)}
    first = run_cli("run", str(spec), "--json", env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    # A file created within CLOCK_SLACK before a launch counts as that launch's (a worker's clock may run
    # behind): real runs are minutes apart, these two only a second or two without this pause.
    time.sleep(CLOCK_SLACK + 1)
    second = run_cli("run", str(spec), env=env, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    found = re.search(r"^Run (\S+) on quickstart: ", second.stdout, re.MULTILINE)
    assert found, second.stdout
    yield json.loads(first.stdout)["run_id"], found.group(1), env, second.stdout
    run_cli("down", "quickstart", "--yes", "--delete-bucket", "--force", env=env)


def test_run_labels_its_scalars_with_its_own_id_on_a_cluster_that_ran_before(two_runs) -> None:  # noqa: ANN001
    first, second, _, printed = two_runs
    lines = [line for line in printed.splitlines() if line.startswith("[scalars]")]
    assert lines and all(line.startswith(f"[scalars] {second} step ") for line in lines), printed
    table = printed[printed.index("last scalars"):].splitlines()[2:]  # after the title and the header
    assert {row.split()[0] for row in table if row.strip()} == {second}, printed
    assert first not in printed


def loss_points(env: dict[str, str], *args: str) -> list[dict]:
    result = run_cli("logs", "quickstart", "--json", "--since", "0", "--tag", "^loss$", *args, env=env)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_logs_show_the_current_run_by_default_and_all_on_request(two_runs) -> None:  # noqa: ANN001
    first, second, env, _ = two_runs
    current = loss_points(env)
    assert {p["run"] for p in current} == {second}
    assert sorted(p["step"] for p in current) == list(range(1, 101))  # one series, no line back to step 1
    every = loss_points(env, "--run", "all")
    assert {p["run"] for p in every} == {first, second} and len(every) == 200
    assert {p["run"] for p in loss_points(env, "--run", first[:-2])} == {first}

    table = run_cli("logs", "quickstart", "--run", "all", env=env)
    rows = [line.split() for line in table.stdout.splitlines()[1:]]
    assert {row[0] for row in rows} == {first, second}, table.stdout  # the run column names each run whole
    default = run_cli("logs", "quickstart", env=env)
    assert {line.split()[0] for line in default.stdout.splitlines()[1:]} == {second}


def test_plot_draws_the_current_run_alone(two_runs) -> None:  # noqa: ANN001
    first, second, env, _ = two_runs
    chart = run_cli("logs", "quickstart", "--plot", "--tag", "^loss$", env=env)
    assert chart.returncode == 0 and second in chart.stdout and first not in chart.stdout
    both = run_cli("logs", "quickstart", "--plot", "--tag", "^loss$", "--run", "all", env=env)
    assert first in both.stdout and second in both.stdout


def test_an_unknown_run_is_one_line(two_runs) -> None:  # noqa: ANN001
    _, second, env, _ = two_runs
    result = run_cli("logs", "quickstart", "--run", "nope", env=env)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("tpuops: error: --run nope is no run of cluster 'quickstart' (hint: give a run id (")
    assert second in line and line.endswith(" or --run all)")
