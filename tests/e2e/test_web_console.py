"""The console in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium pointed at the system driver; ``bin/services`` installs them): sign in,
see three nodes in three zones of a running cluster, open a job, run it now and see its
run appear, pause it and see its status change, and a job named like markup shown as text.

Each test saves a screenshot in its own ``tmp_path`` (printed; pytest keeps the last runs'
folders), never in the repository: ``docs/images/console-overview.png`` is updated by hand.
Every test stands alone (the module shares one cluster and one browser): each makes the
jobs and runs it looks at.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from cluster.jobs.models import JOB_STATUSES, RUN_STATUSES
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.timing.calendars import Calendar
from tests.helpers.databases import fresh_settings
from tests.helpers.nodes import Nodes, init_cluster
from tests.helpers.waiting import until
from tests.helpers.web import Web, make_token, web_process

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCRIPT_NAME = "<script>alert(1)</script>"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="needs the Debian packages chromium and chromium-driver (bin/services)",
    ),
]

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402


def screenshot(browser: WebDriver, folder: Path, name: str) -> Path:
    browser.execute_script("window.scrollTo(0, 0)")
    path = folder / f"{name}.png"
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


@dataclass
class Console:
    web: Web
    token: str
    browser: WebDriver
    settings: ClusterSettings | None = None  # the cluster's, for what the API cannot write

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

    # Pages redraw themselves (the list as its query loads, the overview on its timer): an
    # element found can be gone by the click, which then did nothing and is tried again.
    def click(self, css: str) -> None:
        def clicked() -> bool:
            found = self.find(css)
            try:
                found[0].click()
            except (IndexError, StaleElementReferenceException):
                return False
            return True

        until(clicked, f"a click on {css}", 20)

    def attributes(self, css: str, name: str) -> list[str]:
        script = (
            "return Array.from(document.querySelectorAll(arguments[0]))"
            ".map(e => e.getAttribute(arguments[1]));"
        )
        return list(self.browser.execute_script(script, css, name))

    def sign_in(self) -> None:
        self.open("")
        field = until(lambda: self.find("#token"), "the sign-in form", 20)[0]
        field.send_keys(self.token, Keys.ENTER)
        until(lambda: self.find("#nav:not([hidden])"), "signed in", 20)
        # The first page must be done: a page still loading when the test opens another
        # would draw itself over it (the overview's refresh timer starts once it is drawn).
        until(lambda: self.browser.title.startswith("Pulse: "), "the first page drawn", 20)


@pytest.fixture(scope="module")
def console(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    settings = fresh_settings(database_url)
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
            console = Console(web, token, browser, settings)
            console.sign_in()
            yield console
    finally:
        if browser is not None:
            browser.quit()
        nodes.close()


def _allow(settings: ClusterSettings) -> None:
    import asyncio

    from cluster.store.jobstore.store import JobStore

    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.set_config("api.handlers", "cluster.chaos.witness:record")

    asyncio.run(go())


def test_the_overview_shows_three_nodes_in_three_zones(console: Console, tmp_path: Path) -> None:
    console.open("#/overview")
    until(lambda: console.count("tr.member") == 3, "three members", 20)
    assert set(console.attributes("section.zone", "data-zone")) == {"zone-a", "zone-b", "zone-c"}
    until(lambda: "Healthy" in console.text("#health"), "every shard held", 30)
    assert console.count(".shards li") == 16
    assert console.count("svg.chart polyline.p99") or "No run" in console.text("#lag")
    screenshot(console.browser, tmp_path, "overview")


def test_run_now_shows_the_run_and_pause_changes_the_status(
    console: Console, tmp_path: Path
) -> None:
    console.open("#/jobs?q=nightly")
    until(lambda: console.text("a.job-link") == "nightly", "the job in the list", 20)
    assert console.attributes("#f-status option", "value") == ["", *JOB_STATUSES]
    console.click("a.job-link")
    until(lambda: console.text("#job-name") == "nightly", "the job's page", 20)
    assert console.count("#next-slots tbody tr") == 5
    assert not console.count("#job-runs tbody tr")
    console.click("#do-trigger")
    until(lambda: console.count("#job-runs tbody tr.run"), "the triggered run", 60)
    console.click("#do-pause")
    until(lambda: console.text("#job-status") == "paused", "the paused status", 20)
    assert console.find("#do-resume:not([disabled])")
    screenshot(console.browser, tmp_path, "job")

    console.open("#/runs?job=nightly")
    until(lambda: console.count("#runs tbody tr") == 1, "the runs page", 20)
    assert console.attributes("#r-status option", "value") == ["", *RUN_STATUSES]
    with console.api() as api:
        assert api.post("/api/jobs/default/nightly/trigger").status_code == 200
    until(lambda: console.count("#runs tbody tr") == 2, "a new run, no reload", 60)
    screenshot(console.browser, tmp_path, "runs")


def test_cancel_stops_the_running_slot(console: Console, tmp_path: Path) -> None:
    with console.api() as api:
        created = api.post(
            "/api/jobs",
            json={"name": "sleepy", "schedule": "0 3 * * *", "cancel_grace": "0s",
                  "handler": "cluster.chaos.witness:record", "payload": {"sleep_s": 120}},
        )  # fmt: skip
        assert created.status_code == 201, created.text
        assert api.post("/api/jobs/default/sleepy/trigger").status_code == 200
    console.open("#/job/default/sleepy")
    until(lambda: console.text("#job-name") == "sleepy", "the job's page", 20)
    until(lambda: console.find("#do-cancel:not([disabled])"), "a running slot", 60)
    console.click("#do-cancel")
    until(lambda: "cancelled" in console.text("#job-runs"), "the cancelled run", 30)
    screenshot(console.browser, tmp_path, "cancelled")


def test_a_backfill_is_asked_for_from_the_jobs_page(console: Console) -> None:
    with console.api() as api:
        created = api.post(
            "/api/jobs",
            json={"name": "daily", "schedule": "@daily", "handler": "cluster.chaos.witness:record"},
        )
        assert created.status_code == 201, created.text
    console.open("#/job/default/daily")
    # The page of another job has a backfill form too: wait for this job's.
    until(lambda: console.text("#job-name") == "daily", "the job's page", 20)
    until(lambda: console.find("#backfill"), "the backfill form", 20)
    console.find("#bf-from")[0].send_keys("2026-01-01T00:00:00Z")
    console.find("#bf-to")[0].send_keys("2026-01-04T00:00:00Z")
    script = (
        "return Array.from(document.querySelectorAll('#backfill input[type=text]'), e => e.value);"
    )
    typed = console.browser.execute_script(script)
    assert typed == ["2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z"], "the page was redrawn"
    console.click("#do-backfill")
    # The answer, or the error the page shows instead (said by the assertion).
    shown = until(lambda: console.text("#action-result") or console.text("#message"), "it", 20)
    assert shown.endswith(": 3 slots queued"), shown
    with console.api() as api:
        (made,) = api.get("/api/backfills").json()
    assert (made["job"], made["slots_total"]) == ("daily", 3)


def test_the_trigger_form_is_built_from_the_payload_schema(console: Console) -> None:
    schema = {
        "type": "object",
        "properties": {
            "region": {"enum": ["eu", "us"]},
            "days": {"type": "integer", "minimum": 1},
            "dry": {"type": "boolean"},
            "fail": {"type": "string", "description": "an error to raise"},
        },
        "required": ["region", "days"],
    }
    with console.api() as api:
        created = api.post(
            "/api/jobs",
            json={"name": "regional", "schedule": "0 3 * * *", "payload_schema": schema,
                  "payload": {"region": "eu", "days": 1},
                  "handler": "cluster.chaos.witness:record"},
        )  # fmt: skip
        assert created.status_code == 201, created.text
    console.open("#/job/default/regional")
    until(lambda: console.text("#job-name") == "regional", "the job's page", 20)
    until(lambda: console.find("#trigger-form #tf-region"), "the trigger form", 20)
    assert console.text("#tf-region") == '"eu"\n"us"'  # a required enum: no empty choice
    assert console.attributes("#tf-days", "type") == ["number"]
    assert console.attributes("#tf-dry", "type") == ["checkbox"]
    assert "an error to raise" in console.text("#trigger-form")
    script = "const s = document.querySelector('#tf-region'); s.value = '1';"
    console.browser.execute_script(script)  # "us"
    days = console.find("#tf-days")[0]
    days.clear()
    days.send_keys("0")  # below the schema's minimum: the server refuses it
    console.click("#do-trigger-input")
    until(lambda: "days" in console.text("#message"), "the refusal naming the field", 20)
    assert "does not match payload_schema" in console.text("#message")
    days.clear()
    days.send_keys("3")
    console.find("#tf-fail")[0].send_keys("sent from the form")
    console.click("#do-trigger-input")
    until(lambda: "Queued trigger" in console.text("#action-result"), "the queued run", 20)

    def failed_run() -> list[dict[str, object]]:
        with console.api() as api:
            runs = api.get("/api/runs", params={"job": "regional"}).json()["runs"]
        return [r for r in runs if r["status"] == "failed"]

    (run,) = until(failed_run, "the run with the form's payload", 60)
    assert run["origin"] == "trigger" and "sent from the form" in str(run["error"])


def test_a_name_that_looks_like_markup_is_shown_as_text(console: Console, tmp_path: Path) -> None:
    console.open("#/jobs?q=script")
    until(lambda: console.text("a.job-link") == SCRIPT_NAME, "the job in the list", 20)
    console.click("a.job-link")
    until(lambda: console.text("#job-name") == SCRIPT_NAME, "the job's page", 20)
    with pytest.raises(NoAlertPresentException):
        console.browser.switch_to.alert.text  # noqa: B018
    assert not console.browser.find_elements(By.XPATH, "//main//script")
    screenshot(console.browser, tmp_path, "markup-name")


def test_the_audit_page_lists_the_changes(console: Console, tmp_path: Path) -> None:
    console.open("#/audit")
    until(lambda: console.count("#audit tbody tr"), "audit rows", 20)
    assert "create" in console.text("#audit")
    screenshot(console.browser, tmp_path, "audit")


def test_the_calendars_page_lists_calendars_and_windows(console: Console, tmp_path: Path) -> None:
    assert console.settings is not None
    settings = console.settings

    async def create() -> None:
        async with JobStore.open(settings) as store:
            await store.calendars.put(Calendar.of("office", "mon-fri", ["2031-12-25"]))
            start = datetime.now(UTC) + timedelta(days=30)
            await store.windows.add(start, start + timedelta(hours=2), tenant="default")

    asyncio.run(create())
    console.open("#/calendars")
    until(lambda: console.count("#calendars tbody tr"), "calendar rows", 20)
    assert "office" in console.text("#calendars")
    assert "tenant default" in console.text("#windows")
    screenshot(console.browser, tmp_path, "calendars")


def test_the_overview_charts_the_runs(console: Console, tmp_path: Path) -> None:
    """A run that ended is on the fire lag chart (the docs show this page)."""
    with console.api() as api:
        created = api.post(
            "/api/jobs",
            json={"name": "charted", "schedule": "0 3 * * *",
                  "handler": "cluster.chaos.witness:record"},
        )  # fmt: skip
        assert created.status_code == 201, created.text
        assert api.post("/api/jobs/default/charted/trigger").status_code == 200

        def ended() -> list[str]:
            runs = api.get("/api/runs", params={"job": "charted"}).json()["runs"]
            return [r["status"] for r in runs if r["status"] != "running"]

        assert until(ended, "the triggered run to end", 60) == ["succeeded"]
    console.open("#/overview")
    until(lambda: console.count("svg.chart circle.p99"), "the fire lag chart", 30)
    until(lambda: "Healthy" in console.text("#health"), "every shard held", 30)
    screenshot(console.browser, tmp_path, "overview-with-runs")


def test_the_job_page_shows_its_history_and_rolls_back(console: Console, tmp_path: Path) -> None:
    with console.api() as api:
        made = {"name": "versioned", "schedule": "0 3 * * *",
                "handler": "cluster.chaos.witness:record"}  # fmt: skip
        assert api.post("/api/jobs", json=made).status_code == 201
        changed = api.put("/api/jobs/default/versioned", json={**made, "schedule": "0 4 * * *"})
        assert changed.status_code == 200, changed.text
    console.open("#/job/default/versioned")
    until(lambda: console.text("#job-name") == "versioned", "the job's page", 20)
    until(lambda: console.count("#job-history tr.revision") == 2, "two revisions", 20)
    assert console.attributes("#job-history tr.revision", "data-revision") == ["2", "1"]
    newest = console.text("#job-history tr.revision")
    assert "console" in newest and "api" in newest  # the token's name, and how
    assert 'schedule: "0 3 * * *" → "0 4 * * *"' in newest
    console.click('#job-history tr[data-revision="1"] button.rollback')
    until(
        lambda: "Rolled back to revision 1: now revision 3" in console.text("#action-result"),
        "the rollback's result",
        20,
    )
    until(lambda: console.count("#job-history tr.revision") == 3, "the new revision listed", 20)
    with console.api() as api:
        assert api.get("/api/jobs/default/versioned").json()["schedule"] == "0 3 * * *"
    screenshot(console.browser, tmp_path, "history")


def test_the_jobs_list_and_page_show_each_jobs_health(console: Console, tmp_path: Path) -> None:
    """A run that ends too soon, and one whose metrics fail its --assert: the jobs list and
    the job's page show the last success and the expectation state; the run's output shows
    its metrics."""
    assert console.settings is not None
    settings = console.settings

    async def create() -> None:
        async with JobStore.open(settings) as store:
            await store.definitions.add(
                JobSpec.build("hasty", "0 3 * * *", "cluster.chaos.witness:record",
                              expect_min="1h", api_run=True)
            )  # fmt: skip
            await store.definitions.add(
                JobSpec.build("counted", "0 3 * * *", "tests.e2e.alert_handlers:counts",
                              payload={"rows": 0}, asserts="rows > 0", api_run=True)
            )  # fmt: skip

    asyncio.run(create())
    with console.api() as api:
        for name in ("hasty", "counted"):
            assert api.post(f"/api/jobs/default/{name}/trigger").status_code == 200

        def states() -> dict[str, str | None]:
            jobs = api.get("/api/jobs").json()["jobs"]
            return {
                j["name"]: j["health"]["state"] for j in jobs if j["name"] in ("hasty", "counted")
            }

        until(
            lambda: states() == {"hasty": "too_fast", "counted": "assertion_failed"},
            "both runs judged",
            60,
        )
    console.open("#/jobs?q=hasty")
    until(lambda: console.text("a.job-link") == "hasty", "the job in the list", 20)
    until(lambda: "too_fast since" in console.text("#jobs td.health"), "its state", 20)
    assert console.attributes("#jobs td.health", "data-state") == ["too_fast"]
    screenshot(console.browser, tmp_path, "jobs-health")
    console.open("#/job/default/counted")
    until(lambda: console.text("#job-name") == "counted", "the job's page", 20)
    until(lambda: "assertion_failed since" in console.text("#job-expectation"), "its state", 20)
    assert console.text("#job-health tbody td") != "-"  # its last success
    console.click("#job-runs button")
    until(lambda: console.text("#run-metrics") == "rows=0", "the run's metrics", 20)
    screenshot(console.browser, tmp_path, "job-health")


def test_the_job_page_shows_its_last_slots_as_a_strip(console: Console, tmp_path: Path) -> None:
    """One cell per slot of the last hours, coloured by the audit's verdict, its reason as
    its title: a run, a skip with its reason, the slots without a record, and those behind
    the job's newest ``keep_runs`` runs, whose records retention may have pruned."""
    with console.api() as api:
        made = {"name": "stripped", "schedule": "@every 10m",
                "handler": "cluster.chaos.witness:record"}  # fmt: skip
        assert api.post("/api/jobs", json=made).status_code == 201
    assert console.settings is not None
    now = datetime.now(UTC)
    last = now.replace(minute=now.minute - now.minute % 10, second=0, microsecond=0)
    ran, skipped = last - timedelta(minutes=10), last - timedelta(minutes=30)
    with psycopg.connect(console.settings.database_url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {console.settings.schema}")
        conn.execute(
            "UPDATE job_revisions SET at = %s WHERE job_name = 'stripped'",
            (now - timedelta(hours=1, minutes=5),),
        )
        conn.execute(
            "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, "
            "status, lease_token, last_error) SELECT id, tenant_id, name, v.s, 1, 'node-a', "
            "v.st, 1, v.e FROM jobs, (VALUES (%s::timestamptz, 'succeeded', NULL), "
            "(%s, 'skipped', 'skipped by pulse jobs skip-next')) AS v(s, st, e) "
            "WHERE name = 'stripped'",
            (ran, skipped),
        )
        conn.execute("UPDATE jobs SET keep_runs = 2 WHERE name = 'stripped'")
    console.open("#/job/default/stripped")
    until(lambda: console.text("#job-name") == "stripped", "the job's page", 20)
    until(lambda: console.count("#slot-strip li") >= 6, "the slot strip", 20)
    verdicts = dict(
        zip(
            console.attributes("#slot-strip li", "data-slot"),
            console.attributes("#slot-strip li", "data-verdict"),
            strict=True,
        )
    )
    assert verdicts[ran.isoformat()] == "ran"
    assert verdicts[skipped.isoformat()] == "skipped"
    assert verdicts[(ran - timedelta(minutes=10)).isoformat()] == "missing"
    assert verdicts[(skipped - timedelta(minutes=10)).isoformat()] == "pruned"
    (title,) = console.attributes("#slot-strip li.slot-skipped", "title")
    assert title.endswith("skipped: skipped by pulse jobs skip-next")
    missing = console.attributes("#slot-strip li.slot-missing", "title")
    assert missing and all(t.endswith("missing: no run and no skipped record") for t in missing)
    pruned = console.attributes("#slot-strip li.slot-pruned", "title")
    assert pruned and all("older than the job's retention keeps (keep_runs 2)" in t for t in pruned)
    screenshot(console.browser, tmp_path, "strip")


WITNESS = "cluster.chaos.witness:record"


def test_a_slot_waiting_for_a_named_limit_says_so(console: Console, tmp_path: Path) -> None:
    with console.api() as api:
        made = api.put("/api/limits/console-key", json={"max_concurrent": 1})
        assert made.status_code == 200, made.text
        for name in ("holder-a", "holder-b"):
            body = {"name": name, "schedule": "@every 2s", "handler": WITNESS,
                    "payload": {"sleep_s": 60}, "uses": ["console-key"]}  # fmt: skip
            assert api.post("/api/jobs", json=body).status_code == 201

        def waiter() -> str | None:
            (key,) = [k for k in api.get("/api/limits").json() if k["key"] == "console-key"]
            return key["waiters"][0]["job"] if key["waiters"] and key["holders"] else None

        waiting = until(waiter, "a slot waiting for the key", 30)
    console.open(f"#/job/default/{waiting}")
    until(lambda: console.text("#job-name") == waiting, "the job's page", 20)
    until(lambda: "waiting for key console-key" in console.text("#key-wait"), "the wait", 20)
    screenshot(console.browser, tmp_path, "key-wait")
