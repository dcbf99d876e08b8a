"""A watch job end to end: a legacy cron (a real loop of ``curl`` at every slot boundary)
pings a real ``pulse web``; real nodes run the late pass and deliver its alert to a real
HTTP receiver; then ``pulse jobs adopt`` hands the job to the nodes at a slot boundary,
the legacy cron still pinging. Every slot has one run: pinged, declared missed, or run by
Pulse, never two; the legacy pings for Pulse's slots are reported as double runs.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cluster.alerts.rules import AlertRule
from cluster.jobs.spec import JobSpec
from cluster.local.processes import Command
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.alerts import AlertStore
from tests.helpers.cli import invoke
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.receiver import Receiver, allow_local, receiver
from tests.helpers.waiting import until
from tests.helpers.web import web_process

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]
WITNESS = "cluster.chaos.witness:record"
PERIOD_S = 5

# A cron of one job line: at every multiple of PERIOD_S (as @every slots are), the job's
# output piped to curl, unless a `skip` file says this slot's run is missing.
CRON = r"""
set -u
period_ns=$((PERIOD * 1000000000))
while :; do
  now=$(date +%s%N)
  next=$(( (now / period_ns + 1) * period_ns ))
  wait_ns=$(( next - now ))
  sleep "$(( wait_ns / 1000000000 )).$(printf '%09d' $(( wait_ns % 1000000000 )))"
  slot=$(( next / 1000000000 ))
  if [ -e "$DIR/skip" ]; then rm -f "$DIR/skip"; echo "skip $slot" >> "$DIR/cron.log"; continue; fi
  echo "nightly export $slot done; reported to $URL" \
    | curl -fsS -m 5 --data-binary @- "$URL" >/dev/null \
    && echo "ping $slot" >> "$DIR/cron.log"
done
"""


def cron_log(workdir: Path) -> list[tuple[str, datetime]]:
    path = workdir / "cron.log"
    if not path.exists():
        return []
    return [
        (kind, datetime.fromtimestamp(int(at), UTC))
        for kind, at in (line.split() for line in path.read_text().splitlines() if line)
    ]


def events(r: Receiver, kind: str) -> list[str]:
    return [q.json()["slot"] for q in r.received() if q.json()["event"] == kind]


def add_rule(settings: ClusterSettings, url: str, events: str = "late,double_run") -> None:
    async def go() -> None:
        async with AlertStore.open(settings) as alerts:
            await alerts.add_rule(AlertRule.build("ops", url, events=events))

    asyncio.run(go())


def test_a_watched_cron_is_alerted_once_for_a_missed_ping_then_adopted_without_a_double(
    fleet: Fleet, settings: ClusterSettings, tmp_path: Path
) -> None:
    init_cluster(
        settings,
        JobSpec.build("export", f"@every {PERIOD_S}s", WITNESS, watch=True, late_after="3s"),
    )
    allow_local(settings)
    with receiver() as r, web_process(settings, tmp_path) as web:
        add_rule(settings, r.url)
        shown = invoke(settings, "jobs", "ping-url", "export", "--web-url", web.url, "--json")
        assert shown.exit_code == 0, shown.output
        url = json.loads(shown.output)["ping_url"]
        token = url.rsplit("/", 1)[1]
        for node_id, zone in (("n1", "a"), ("n2", "b")):
            fleet.start(node_id, zone)
        env = {"PATH": "/usr/bin:/bin", "PERIOD": str(PERIOD_S), "DIR": str(tmp_path), "URL": url}
        cron = Command(("bash", "-c", CRON), env).start("cron", tmp_path / "cron.out")
        try:
            # Two slots pinged, then one missing: alerted once, for that slot alone.
            until(lambda: [k for k, _ in cron_log(tmp_path)].count("ping") >= 2, "pings", 40)
            (tmp_path / "skip").touch()
            skipped = until(
                lambda: next((s for k, s in cron_log(tmp_path) if k == "skip"), None),
                "the skipped slot", 20,
            )  # fmt: skip
            until(lambda: events(r, "late"), "the late alert", 30)
            until(
                lambda: sum(1 for k, s in cron_log(tmp_path) if k == "ping" and s > skipped) >= 3,
                "three more pings",
                40,
            )
            # Slots before the cron's first ping (it started after the job) had none either.
            first = min(s for k, s in cron_log(tmp_path) if k == "ping")
            late = [datetime.fromisoformat(e) for e in events(r, "late")]
            assert [e for e in late if e >= first] == [skipped]
            assert all(e < first for e in late if e != skipped)

            # Adopted two slots ahead: the nodes run from there, the cron keeps pinging.
            at = math.ceil(time.time() / PERIOD_S) * PERIOD_S + 2 * PERIOD_S
            slot = datetime.fromtimestamp(at, UTC)
            adopted = invoke(settings, "jobs", "adopt", "export", "--at", slot.isoformat())
            assert adopted.exit_code == 0, adopted.output
            until(
                lambda: len({e.slot for e in fleet.executions()}) >= 3,
                "three slots run by the nodes",
                60,
            )
            until(lambda: slot.isoformat() in events(r, "double_run"), "a double run", 30)
        finally:
            cron.stop(5)
        fleet.check_alive()

    executions = fleet.executions()
    by_slot = Counter(e.slot for e in executions)
    assert min(by_slot) == slot and max(by_slot.values()) == 1  # nothing before, none twice
    runs = {
        row["scheduled_for"]: row
        for row in fleet.sql(
            "SELECT scheduled_for, status, node_id, origin, output FROM runs"
            " WHERE job_name = 'export'"
        )
    }
    for ran in by_slot:  # Pulse's slots keep Pulse's run rows
        assert runs[ran]["node_id"] is not None and runs[ran]["origin"] != "ping"
    watched = {s: row for s, row in runs.items() if s < slot}
    assert watched[skipped]["status"] == "failed" and watched[skipped]["node_id"] is None
    pinged = [row for s, row in watched.items() if s != skipped and s >= first]
    assert pinged and all(row["status"] == "succeeded" for row in pinged)
    for row in pinged:  # the body is kept as output, the ping URL's token hidden
        assert "nightly export" in row["output"]["stdout"]
        assert token not in json.dumps(row["output"]) and "***" in row["output"]["stdout"]
    doubles = fleet.sql("SELECT slot FROM watch_doubles")
    assert {d["slot"] for d in doubles} <= set(by_slot) and slot in {d["slot"] for d in doubles}


def test_pulse_ping_records_a_start_and_an_end_with_its_output(
    settings: ClusterSettings, tmp_path: Path
) -> None:
    init_cluster(settings, JobSpec.build("report", "@hourly", None, watch=True))
    with web_process(settings, tmp_path) as web:
        shown = invoke(settings, "jobs", "ping-url", "report", "--web-url", web.url, "--json")
        url = json.loads(shown.output)["ping_url"]
        assert invoke(settings, "ping", url, "--start").exit_code == 0
        out = tmp_path / "out.txt"
        out.write_text("42 rows exported\n")
        ended = invoke(settings, "ping", url, "--body-file", str(out))
        assert ended.exit_code == 0, ended.output
        assert "recorded for slot" in ended.output
        refused = invoke(settings, "ping", url + "x")
        assert (refused.exit_code, refused.output.strip()) == (1, "pulse: ping refused: HTTP 404")
        bad = invoke(settings, "ping", "ftp://example/api/ping/x")
        assert bad.exit_code == 2 and "invalid url" in bad.output
        again = invoke(settings, "jobs", "ping-url", "report")
        assert again.exit_code == 2 and "--rotate" in again.output
    (row,) = Fleet(settings, tmp_path).sql(
        "SELECT status, duration_s, output FROM runs WHERE job_name = 'report'"
    )
    assert row["status"] == "succeeded" and row["duration_s"] >= 0
    assert row["output"] == {"stdout": "42 rows exported\n"}


def test_a_hung_watched_run_fails_at_its_timeout_even_with_a_node_killed(
    fleet: Fleet, settings: ClusterSettings, tmp_path: Path
) -> None:
    """A cron sends `/start` and hangs: a live node's late pass records the run timed_out
    and alerts `failed` once, though the other node was SIGKILLed meanwhile; the end ping
    that comes at last is noted on that run, not filed under a new slot."""
    init_cluster(settings, JobSpec.build("hung", "@hourly", None, watch=True, timeout="3s"))
    allow_local(settings)
    with receiver() as r, web_process(settings, tmp_path) as web:
        add_rule(settings, r.url, events="failed")
        shown = invoke(settings, "jobs", "ping-url", "hung", "--web-url", web.url, "--json")
        url = json.loads(shown.output)["ping_url"]
        for node_id, zone in (("n1", "a"), ("n2", "b")):
            fleet.start(node_id, zone)
        started = invoke(settings, "ping", url, "--start")
        assert started.exit_code == 0, started.output
        slot = started.output.split(" for slot ")[1].strip()
        fleet.node("n1").signal(signal.SIGKILL)
        assert until(lambda: events(r, "failed"), "the failed alert", 30) == [slot]
        (alert,) = [q.json() for q in r.received()]
        assert alert["error"] == "no end ping within 3s of its /start (watch job)"
        nothing = invoke(settings, "runs", "cancel", "hung")
        assert nothing.exit_code == 1 and "is running" in nothing.output, nothing.output
        listed = invoke(settings, "runs", "--job", "hung", "--status", "running", "--json")
        assert json.loads(listed.output) == []
        out = tmp_path / "out.txt"
        out.write_text("exported at last\n")
        ended = invoke(settings, "ping", url, "--body-file", str(out))
        assert ended.exit_code == 0, ended.output
        assert ended.output.strip() == f"late for slot {slot}"
    (row,) = fleet.sql(
        "SELECT scheduled_for, status, last_error, output FROM runs WHERE job_name = 'hung'"
    )
    assert (row["scheduled_for"].isoformat(), row["status"]) == (slot, "timed_out")
    assert "; its end ping (success) came " in row["last_error"]
    assert row["output"] == {"stdout": "exported at last\n"}
    assert fleet.sql("SELECT event, slot FROM alert_events") == [
        {"event": "failed", "slot": row["scheduled_for"]}
    ]
