"""The console in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium pointed at the system driver; ``bin/services`` installs them): sign in,
see three nodes in three zones of a running cluster, open a job, run it now and see its
run appear, pause it and see its status change, and a job named like markup shown as text.

Each test saves a screenshot to ``$PULSE_SCREENSHOTS`` (default: a ``pulse-console`` folder
in the system's temporary directory, printed); with ``PULSE_UPDATE_SCREENSHOTS=1`` the
overview also replaces ``docs/images/console-overview.png``, which the docs show.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cluster.settings import ClusterSettings
from tests.conftest import REDIS_URL
from tests.nodeprocs import REPO, Nodes, init_cluster, wait_until
from tests.webproc import Web, make_token, web_process

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCRIPT_NAME = "<script>alert(1)</script>"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="needs the Debian packages chromium and chromium-driver (bin/services)",
    ),
]

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402


def shots() -> Path:
    folder = Path(
        os.environ.get("PULSE_SCREENSHOTS") or Path(tempfile.gettempdir()) / "pulse-console"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(browser: WebDriver, name: str) -> Path:
    browser.execute_script("window.scrollTo(0, 0)")
    path = shots() / f"{name}.png"
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


@dataclass
class Console:
    web: Web
    token: str
    browser: WebDriver

    def api(self) -> httpx.Client:
        return self.web.client(self.token)

    def open(self, fragment: str) -> None:
        self.browser.get(f"{self.web.url}/console/{fragment}")

    def find(self, css: str) -> list[object]:
        return list(self.browser.find_elements(By.CSS_SELECTOR, css))

    # Read in one script call: the overview redraws itself, so a handle found by one call
    # can be stale by the next.
    def text(self, css: str) -> str:
        script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';"
        return str(self.browser.execute_script(script, css))

    def count(self, css: str) -> int:
        script = "return document.querySelectorAll(arguments[0]).length;"
        return int(self.browser.execute_script(script, css))

    def attributes(self, css: str, name: str) -> list[str]:
        script = (
            "return Array.from(document.querySelectorAll(arguments[0]))"
            ".map(e => e.getAttribute(arguments[1]));"
        )
        return list(self.browser.execute_script(script, css, name))

    def sign_in(self) -> None:
        self.open("")
        field = wait_until(lambda: self.find("#token"), 20, "the sign-in form")[0]
        field.send_keys(self.token, Keys.ENTER)
        wait_until(lambda: self.find("#nav:not([hidden])"), 20, "signed in")


@pytest.fixture(scope="module")
def console(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    tag = secrets.token_hex(4)
    settings = ClusterSettings(
        database_url=database_url, redis_url=REDIS_URL, schema=f"t_{tag}", cluster=f"test-{tag}"
    )
    init_cluster(settings)
    workdir = tmp_path_factory.mktemp("console")
    nodes = Nodes(settings, workdir)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1280,1100", "--disable-gpu"):  # fmt: skip
        options.add_argument(arg)
    browser = None
    try:
        for node_id, zone in (("node-a", "zone-a"), ("node-b", "zone-b"), ("node-c", "zone-c")):
            nodes.start(node_id, zone)
        token = make_token(settings, "console", "admin")
        with web_process(settings, workdir) as web:
            with web.client(token) as api:
                _allow(settings)
                for name in ("nightly", SCRIPT_NAME):
                    created = api.post(
                        "/api/jobs",
                        json={"name": name, "schedule": "0 3 * * *",
                              "handler": "cluster.chaos.witness:record"},
                    )  # fmt: skip
                    assert created.status_code == 201, created.text
            browser = webdriver.Chrome(
                options=options, service=Service(executable_path=str(CHROMEDRIVER))
            )
            browser.implicitly_wait(0)
            console = Console(web, token, browser)
            console.sign_in()
            yield console
    finally:
        if browser is not None:
            browser.quit()
        nodes.close()


def _allow(settings: ClusterSettings) -> None:
    import asyncio

    from cluster.store.jobs import JobStore

    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.set_config("api.handlers", "cluster.chaos.witness:*")

    asyncio.run(go())


def test_the_overview_shows_three_nodes_in_three_zones(console: Console) -> None:
    console.open("#/overview")
    wait_until(lambda: console.count("tr.member") == 3, 20, "three members")
    assert set(console.attributes("section.zone", "data-zone")) == {"zone-a", "zone-b", "zone-c"}
    wait_until(lambda: "Healthy" in console.text("#health"), 30, "every shard held")
    assert console.count(".shards li") == 16
    assert console.count("svg.chart polyline.p99") or "No run" in console.text("#lag")
    screenshot(console.browser, "overview")


def test_run_now_shows_the_run_and_pause_changes_the_status(console: Console) -> None:
    console.open("#/jobs?q=nightly")
    link = wait_until(lambda: console.find("a.job-link"), 20, "the job in the list")[0]
    link.click()
    wait_until(lambda: console.text("#job-name") == "nightly", 20, "the job's page")
    assert console.count("#next-slots tbody tr") == 5
    assert not console.count("#job-runs tbody tr")
    console.find("#do-trigger")[0].click()
    wait_until(lambda: console.count("#job-runs tbody tr.run"), 60, "the triggered run")
    console.find("#do-pause")[0].click()
    wait_until(lambda: console.text("#job-status") == "paused", 20, "the paused status")
    assert console.find("#do-resume:not([disabled])")
    screenshot(console.browser, "job")

    console.open("#/runs?job=nightly")
    wait_until(lambda: console.count("#runs tbody tr") == 1, 20, "the runs page")
    with console.api() as api:
        assert api.post("/api/jobs/default/nightly/trigger").status_code == 200
    wait_until(lambda: console.count("#runs tbody tr") == 2, 60, "a new run, no reload")
    screenshot(console.browser, "runs")


def test_cancel_stops_the_running_slot(console: Console) -> None:
    with console.api() as api:
        created = api.post(
            "/api/jobs",
            json={"name": "sleepy", "schedule": "0 3 * * *", "cancel_grace": "0s",
                  "handler": "cluster.chaos.witness:record", "payload": {"sleep_s": 120}},
        )  # fmt: skip
        assert created.status_code == 201, created.text
        assert api.post("/api/jobs/default/sleepy/trigger").status_code == 200
    console.open("#/job/default/sleepy")
    wait_until(lambda: console.text("#job-name") == "sleepy", 20, "the job's page")
    wait_until(lambda: console.find("#do-cancel:not([disabled])"), 60, "a running slot")
    console.find("#do-cancel")[0].click()
    wait_until(lambda: "cancelled" in console.text("#job-runs"), 30, "the cancelled run")
    screenshot(console.browser, "cancelled")


def test_a_backfill_is_asked_for_from_the_jobs_page(console: Console) -> None:
    with console.api() as api:
        created = api.post(
            "/api/jobs",
            json={"name": "daily", "schedule": "@daily", "handler": "cluster.chaos.witness:record"},
        )
        assert created.status_code == 201, created.text
    console.open("#/job/default/daily")
    wait_until(lambda: console.find("#backfill"), 20, "the backfill form")
    console.find("#bf-from")[0].send_keys("2026-01-01T00:00:00Z")
    console.find("#bf-to")[0].send_keys("2026-01-04T00:00:00Z")
    console.find("#do-backfill")[0].click()
    wait_until(lambda: "3 slots queued" in console.text("#action-result"), 20, "the request")
    with console.api() as api:
        (made,) = api.get("/api/backfills").json()
    assert (made["job"], made["slots_total"]) == ("daily", 3)


def test_a_name_that_looks_like_markup_is_shown_as_text(console: Console) -> None:
    console.open("#/jobs?q=script")
    link = wait_until(lambda: console.find("a.job-link"), 20, "the job in the list")[0]
    assert link.text == SCRIPT_NAME
    link.click()
    wait_until(lambda: console.text("#job-name") == SCRIPT_NAME, 20, "the job's page")
    with pytest.raises(NoAlertPresentException):
        console.browser.switch_to.alert.text  # noqa: B018
    assert not console.browser.find_elements(By.XPATH, "//main//script")
    screenshot(console.browser, "markup-name")


def test_the_audit_page_lists_the_changes(console: Console) -> None:
    console.open("#/audit")
    wait_until(lambda: console.count("#audit tbody tr"), 20, "audit rows")
    assert "create" in console.text("#audit")
    screenshot(console.browser, "audit")


def test_the_overview_charts_the_runs_of_the_tests_above(console: Console) -> None:
    """Runs last: the runs started above are on the chart (the docs show this screenshot)."""
    console.open("#/overview")
    wait_until(lambda: console.count("svg.chart circle.p99"), 30, "the fire lag chart")
    wait_until(lambda: "Healthy" in console.text("#health"), 30, "every shard held")
    path = screenshot(console.browser, "overview-with-runs")
    if os.environ.get("PULSE_UPDATE_SCREENSHOTS") == "1":
        shutil.copy(path, REPO / "docs" / "images" / "console-overview.png")
