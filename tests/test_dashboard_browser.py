"""The dashboard in a real browser: the distribution's Chromium (/usr/bin/chromium; `.ci/run` installs the
`chromium` package, nothing is downloaded at test time) driven by Playwright, against the local simulator with a
guard that recovers a preemption and then a hang. One end-to-end test: the page shows the recovery on the chart
and the incident; the screenshots land under the test's tmp path (printed, so `pytest -ra -s` shows them)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_guard_local import cli, kinds, ledger_of, quickstart, wait_until  # noqa: F401  (quickstart: fixture)
from tests.test_quickstart import processes_under
from tpuops.context import Context
from tpuops.dashboard.board import Board
from tpuops.dashboard.server import DashboardServer

CHROMIUM = Path(os.environ.get("TPUOPS_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# The watchdog in seconds (tests/test_watchdog.py does the same): charlm flushes its scalars every 5 s at most.
WATCHDOG = {"TPUOPS_WATCHDOG_MIN_HANG": "8", "TPUOPS_WATCHDOG_MAX_HANG": "12", "TPUOPS_WATCHDOG_CONFIRM_GAP": "0.5"}
PAGE_WAIT_MS = 60_000


@pytest.fixture
def browser() -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' (playwright)")
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def dashboard() -> Iterator[DashboardServer]:
    server = DashboardServer(("127.0.0.1", 0), lambda: Board(Context.from_env(), live_ttl=2.0))
    thread = server.serve_in_thread(poll_interval=0.05)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def trainers(home: Path) -> list[int]:
    """The charlm processes of the workers (not the shells around them)."""
    found = []
    for pid in processes_under(home / "local" / "workers"):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"train.py" in command and command.startswith(b"python"):
            found.append(pid)
    return found


def test_the_page_shows_the_recovery_on_the_chart_and_the_hang_incident(
        quickstart: str, tpuops_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        browser: object, dashboard: DashboardServer) -> None:
    for key, value in WATCHDOG.items():
        monkeypatch.setenv(key, value)  # the guard started below inherits them
    assert cli("guard", "up", "quickstart").returncode == 0
    ledger = ledger_of(tpuops_home, "tpuops-quickstart", "quickstart")
    wait_until(lambda: (beat := ledger.heartbeat()) is not None and beat.step, "the guard to see steps")
    assert cli("simulate", "preempt", "quickstart").returncode == 0
    wait_until(lambda: "recovered" in kinds(ledger), "the recovery")

    # A hang: every trainer stopped (alive, no step advancing); the guard's watchdog confirms it, captures stacks
    # and output, writes the incident and restarts the run.
    wait_until(lambda: trainers(tpuops_home), "the relaunched trainers")
    resumed = next(e for _, e in ledger.events() if e.kind == "recovered").data["first_step_after"]
    # a few steps of the resumed run, so its pace is known
    wait_until(lambda: (beat := ledger.heartbeat()) is not None and (beat.step or 0) >= resumed + 100,
               "the resumed run to step on")
    stopped = trainers(tpuops_home)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    records = tpuops_home / "local" / "buckets" / "tpuops-quickstart" / ".tpuops" / "quickstart"
    try:
        wait_until(lambda: list(records.glob("incidents/*/incident.json")), "the watchdog's incident", timeout=180)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    page = browser.new_page(viewport={"width": 1300, "height": 1800})  # type: ignore[attr-defined]
    page.goto(dashboard.url)
    page.wait_for_selector('tr[data-cluster="quickstart"]', timeout=PAGE_WAIT_MS)
    page.wait_for_selector('#hours-body tr[data-cluster="quickstart"]', timeout=PAGE_WAIT_MS)
    prices = page.locator('#hours-body tr[data-cluster="quickstart"] .price').all_inner_texts()
    assert prices and set(prices) == {"simulator"}, prices  # free, as `status` says, not list-price dollars
    overview = tmp_path / "dashboard-clusters.png"
    page.screenshot(path=str(overview), full_page=True)
    page.click('a[href="#cluster=quickstart"]')
    # (a vertical line has an empty box, which Playwright calls hidden: attached is what is asked here)
    page.wait_for_selector('svg.chart[data-tag="loss"] line.marker-recovery', state="attached",
                           timeout=PAGE_WAIT_MS)
    page.wait_for_selector("div.incident", timeout=PAGE_WAIT_MS)
    assert page.locator('svg.chart[data-tag="loss"] line.marker-preemption').count() >= 1
    assert page.locator('svg.chart[data-tag="loss"] path.series').count() >= 1
    incident = page.locator("div.incident").first.inner_text()
    assert "restart" in incident and "odd worker" in incident, incident
    page.locator("div.incident details summary").first.click()  # stays open across the page's refreshes
    page.wait_for_selector("div.incident details[open] pre", timeout=PAGE_WAIT_MS)
    assert page.locator("div.incident details[open] pre").first.inner_text().strip()  # stacks or output tail
    assert page.locator("svg.timeline circle.event-recovered").count() >= 1
    assert "runtime" in page.locator("#cluster .goodput-text").inner_text()
    cluster_shot = tmp_path / "dashboard-cluster.png"
    page.screenshot(path=str(cluster_shot), full_page=True)
    page.close()
    print(f"\nscreenshots: {overview} {cluster_shot}")
