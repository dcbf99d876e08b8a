"""The watch jobs' commands (cluster/cli/jobs/watching.py, `jobs add --watch`): the ping URL
shown once, adoption, and bad input (one line naming the field, exit 2, nothing written)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from cluster.settings import ClusterSettings
from tests.helpers.cli import Invoke, assert_bad_input, jobs_rows

HANDLER = "cluster.chaos.witness:record"


def test_add_watch_shows_the_ping_url_once(initialised: Invoke, settings: ClusterSettings) -> None:
    added = initialised(
        "jobs", "add", "export", "--watch", "--schedule", "30 2 * * *", "--tz", "Europe/Berlin",
        "--web-url", "https://pulse.example.com/",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    url = next(w for w in added.output.split() if w.startswith("https://"))
    assert (
        url.startswith("https://pulse.example.com/api/ping/") and len(url.rsplit("/", 1)[1]) == 43
    )
    assert "curl" in added.output  # the crontab line
    shown = initialised("jobs", "show", "export", "--json")
    assert json.loads(shown.output)["watch"] is True
    assert url.rsplit("/", 1)[1] not in shown.output
    assert_bad_input(initialised("jobs", "ping-url", "export"), "rotate")
    rotated = initialised("jobs", "ping-url", "export", "--rotate", "--json")
    assert json.loads(rotated.output)["ping_url"] != url


def test_adopt_from_the_cli(initialised: Invoke) -> None:
    assert initialised("jobs", "add", "w", "--watch", "--schedule", "@every 10s").exit_code == 0
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    at = at.replace(second=at.second // 10 * 10)
    adopted = initialised(
        "jobs", "adopt", "w", "--at", at.isoformat(), "--handler", HANDLER, "--json"
    )
    assert adopted.exit_code == 0, adopted.output
    job = json.loads(adopted.output)
    assert (job["adopt_at"], job["handler"], job["watch"]) == (at.isoformat(), HANDLER, True)


def test_watch_bad_input_writes_nothing(initialised: Invoke, settings: ClusterSettings) -> None:
    assert initialised("jobs", "add", "w", "--watch", "--schedule", "@every 10s").exit_code == 0
    assert (
        initialised("jobs", "add", "r", "--schedule", "@hourly", "--handler", HANDLER).exit_code
        == 0
    )
    before = jobs_rows(settings)
    later = (datetime.now(UTC) + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    for args, field in (
        (["jobs", "add", "x", "--watch", "--schedule", "@every 10s", "--zones", "a"], "watch"),
        (["jobs", "add", "x", "--watch", "--at", "2030-01-01T00:00:00+00:00"], "watch"),
        (["jobs", "adopt", "w", "--at", later.isoformat()], "handler"),
        (["jobs", "adopt", "w", "--at", "2020-01-01T00:00:00+00:00", "--handler", HANDLER], "at"),
        (["jobs", "adopt", "w", "--at", (later + timedelta(seconds=3)).isoformat(),
          "--handler", HANDLER], "at"),
        (["jobs", "adopt", "r", "--at", later.isoformat()], "name"),
        (["jobs", "adopt", "w", "--at", later.isoformat(), "--handler", "not a ref"], "handler"),
        (["jobs", "ping-url", "r"], "name"),
        (["jobs", "trigger", "w"], "name"),
    ):  # fmt: skip
        assert_bad_input(initialised(*args), field)
    missing = initialised("jobs", "add", "x", "--schedule", "@hourly")
    assert missing.exit_code == 2 and "--handler" in missing.output
    assert jobs_rows(settings) == before
