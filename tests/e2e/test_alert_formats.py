"""The ``pagerduty`` and ``email`` formats end to end: a real node delivers its outbox to a
real HTTP receiver standing in for PagerDuty's Events API and to a real SMTP server. A job
fails once, then succeeds: PagerDuty gets a trigger and a resolve under one dedup key, the
mailbox a message for each, and every delivery is marked delivered once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cluster.alerts.rules import AlertRule
from cluster.config.egress import EGRESS_ALLOW
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from tests.helpers.fleet import Fleet
from tests.helpers.mailbox import HOST, mailbox
from tests.helpers.nodes import init_cluster
from tests.helpers.receiver import receiver
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
ROUTING_KEY = "e2e-routing-key-5a1f"


def configure(settings: ClusterSettings, smtp_port: int, pagerduty_url: str) -> None:
    async def go() -> None:
        async with JobStore.open(settings) as store:
            for key, value in {
                EGRESS_ALLOW: "127.0.0.0/8",
                "smtp.host": HOST,
                "smtp.port": str(smtp_port),
                "smtp.tls": "none",
                "smtp.from": "pulse@example.com",
            }.items():
                await store.set_config(key, value)
        # Only these two: a node slowed by a busy machine may also skip or start late.
        on = "failed,recovered"
        async with AlertStore.open(settings) as alerts:
            await alerts.add_rule(
                AlertRule.build(
                    "pd", pagerduty_url, format="pagerduty", secret_env="PD_KEY", events=on
                )
            )
            await alerts.add_rule(
                AlertRule.build("mail", None, format="email", to="ops@example.com", events=on)
            )

    asyncio.run(go())


def test_a_node_pages_then_resolves_and_mails_both(
    fleet: Fleet, settings: ClusterSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PD_KEY", ROUTING_KEY)  # the node inherits it
    init_cluster(
        settings,
        JobSpec.build("flaky", "@every 2s", "tests.e2e.alert_handlers:fails_once",
                      payload={"dir": str(tmp_path)}),
    )  # fmt: skip
    with receiver(status=202) as pagerduty, mailbox() as box:
        configure(settings, box.port, pagerduty.url)
        fleet.start("n1", "a")

        def delivered() -> list[dict[str, Any]] | None:
            rows = fleet.sql("SELECT rule_name, status FROM alert_deliveries ORDER BY id")
            done = [r for r in rows if r["status"] == "delivered"]
            return rows if len(rows) >= 4 and len(done) == len(rows) else None

        try:
            rows = until(delivered, "four deliveries delivered", 60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{fleet.logs()}") from exc
        pages = pagerduty.received()
        mails = box.received()
    assert sorted(r["rule_name"] for r in rows) == ["mail", "mail", "pd", "pd"]
    assert [p.json()["event_action"] for p in pages] == ["trigger", "resolve"], [
        p.json() for p in pages
    ]
    assert {p.json()["dedup_key"] for p in pages} == {"pulse/pd/default/flaky"}
    assert all(p.json()["routing_key"] == ROUTING_KEY for p in pages)
    assert pages[0].json()["payload"]["custom_details"]["error"].endswith("first run fails")
    assert [m.message["X-Pulse-Event"] for m in mails] == ["failed", "recovered"]
    assert all(m.recipients == ("ops@example.com",) for m in mails)
    assert "RuntimeError: first run fails" in mails[0].message.get_content()
    assert ROUTING_KEY not in fleet.node("n1").tail(500)
