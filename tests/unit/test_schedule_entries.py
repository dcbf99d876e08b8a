"""Several schedules per job, pure: the union of the entries' slots (duplicates once, each
entry inside its start and end, DST per entry), which entry a slot belongs to, the stored
text, the end of a job whose entries all end, and the checks of ``schedules:`` and
``max_runs`` (one ``InvalidInput`` naming the field)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.timing.catchup import CatchUp, plan_catchup
from cluster.timing.schedule import ENDED, parse_schedule
from pulsecron import Registry, RunContext

H = "m:f"
T0 = datetime(2027, 3, 1, tzinfo=UTC)


def spec(**entry: Any) -> JobSpec:
    return JobSpec.from_mapping({"name": "j", "handler": H, **entry})


def test_the_union_in_order_with_a_shared_instant_once() -> None:
    job = spec(schedules=["0 9 * * *", "0 9,18 * * *", "@every 12h"])
    schedule = job.parsed_schedule()
    slots = schedule.next_n(T0, 5)
    assert slots == [
        T0 + timedelta(hours=9),
        T0 + timedelta(hours=12),
        T0 + timedelta(hours=18),
        T0 + timedelta(days=1),
        T0 + timedelta(days=1, hours=9),
    ]
    # A shared instant belongs to the first entry that has it.
    assert [schedule.entry_at(s) for s in slots] == [0, 2, 1, 2, 0]
    assert schedule.entry_at(T0 + timedelta(minutes=1)) is None


def test_start_and_end_bound_each_entry_and_a_finished_union_ends() -> None:
    job = spec(
        schedules=[
            {"schedule": "@hourly", "start": "2027-03-01T02:00:00Z", "end": "2027-03-01T04:00:00Z"},
            {"schedule": "@at 2027-03-02T00:00:00+01:00"},
        ]
    )
    schedule = job.parsed_schedule()
    assert schedule.ends
    assert schedule.next_n(T0, 5) == [
        T0 + timedelta(hours=2),
        T0 + timedelta(hours=3),
        datetime(2027, 3, 1, 23, tzinfo=UTC),
        ENDED,
    ]
    # Catch-up over an outage across the end lands on ENDED: the job is done.
    plan = plan_catchup(schedule, T0, T0 + timedelta(days=3), CatchUp("once"))
    assert plan.next_slot == datetime(2027, 3, 1, 23, tzinfo=UTC)
    assert plan_catchup(schedule, plan.next_slot + timedelta(seconds=1), T0 + timedelta(days=3),
                        CatchUp("once")).next_slot == ENDED  # fmt: skip


def test_each_entry_keeps_the_dst_rules_of_the_job() -> None:
    job = spec(schedules=["30 2 * * *", "0 12 * * *"], tz="Europe/Berlin", dst_repeated="twice")
    spring = datetime(2027, 3, 28, tzinfo=UTC)  # Berlin skips 02:00-03:00
    assert job.parsed_schedule().next_n(spring - timedelta(hours=2), 2) == [
        datetime(2027, 3, 28, 1, tzinfo=UTC),  # 02:30 shifted to the transition (03:00 CEST)
        datetime(2027, 3, 28, 10, tzinfo=UTC),
    ]
    autumn = datetime(2027, 10, 31, tzinfo=UTC)  # 02:00-03:00 twice
    assert job.parsed_schedule().next_n(autumn, 2) == [
        datetime(2027, 10, 31, 0, 30, tzinfo=UTC),
        datetime(2027, 10, 31, 1, 30, tzinfo=UTC),
    ]


def test_the_stored_text_is_canonical_and_one_plain_entry_stays_plain() -> None:
    a = spec(schedules=["30  9 * * *", {"schedule": "@HOURLY", "payload": {"b": 2, "a": 1}}])
    b = spec(schedules=["30 9 * * *", {"payload": {"a": 1, "b": 2}, "schedule": "@hourly"}])
    assert a.schedule == b.schedule
    assert a.schedule.startswith("@schedules [")
    assert spec(schedules=["0 9 * * *"]).schedule == "0 9 * * *"
    # Spaces inside payload strings are kept.
    c = spec(schedules=["@daily", {"schedule": "5 * * * *", "payload": {"s": "a  b"}}])
    assert c.parsed_schedule().entries[1].payload == {"s": "a  b"}


def test_same_instant_with_different_payloads_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInput, match=r"schedules: entries 1 and 2 both have the slot "
                       r"\d{4}-\d\d-\d\dT09:00:00\+00:00 with different payloads"):  # fmt: skip
        spec(schedules=[{"schedule": "0 9 * * *", "payload": {"x": 1}}, "0 9,18 * * *"])
    # The same payload (the job's) on both is fine: the instant runs once.
    spec(schedules=["0 9 * * *", "0 9,18 * * *"], payload={"x": 1})
    # Bounds that keep them apart are fine too.
    spec(
        schedules=[
            {"schedule": "0 9 * * *", "payload": {"x": 1}, "end": "2030-01-01T00:00:00Z"},
            {"schedule": "0 9 * * *", "payload": {"x": 2}, "start": "2030-01-01T00:00:00Z"},
        ]
    )


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"schedules": []}, "schedules"),
        ({"schedules": "0 9 * * *"}, "schedules"),
        ({"schedules": ["0 9 * * *"], "schedule": "@daily"}, "schedules"),
        ({"schedules": [{"payload": {}}]}, "schedules[1].schedule"),
        ({"schedules": ["@daily", {"schedule": "@hourly", "when": 1}]}, "schedules[2].when"),
        ({"schedules": ["@daily", {"schedule": "bad"}]}, "schedule"),
        (
            {"schedules": ["@daily", {"schedule": "@hourly", "payload": [1]}]},
            "schedules[2].payload",
        ),
        ({"schedules": ["@daily", {"schedule": "@hourly", "start": "soon"}]}, "schedules[2].start"),
        (
            {"schedules": ["@daily", {"schedule": "@hourly", "end": "2030-01-01T00:00:00"}]},
            "schedules[2].end",
        ),
        (
            {
                "schedules": [
                    "@daily",
                    {
                        "schedule": "@hourly",
                        "start": "2030-01-02T00:00:00Z",
                        "end": "2030-01-01T00:00:00Z",
                    },
                ]
            },
            "schedules[2].end",
        ),
        ({"schedules": [{"schedule": "@hourly", "end": "2020-01-01T00:00:00Z"}]}, "schedules"),
        ({"schedule": '@schedules [{"schedule":"@daily","payload":[]}]'}, "schedules[1].payload"),
        ({"schedules": ["@daily"] * 65}, "schedules"),
        ({"schedule": "@daily", "max_runs": 0}, "max_runs"),
        ({"schedule": "@daily", "max_runs": "x"}, "max_runs"),
        ({"schedule": "@at 2030-01-01T00:00:00Z", "max_runs": 2}, "max_runs"),
        ({"schedule": "@daily", "max_runs": 2, "overlap": "allow"}, "max_runs"),
        (
            {
                "schedules": [{"schedule": "@hourly", "end": "2030-01-01T00:00:00Z"}],
                "calendar": "c",
            },
            "calendar",
        ),
    ],
)
def test_bad_schedules_name_the_field(entry: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        spec(**entry)
    assert caught.value.field == field, str(caught.value)
    assert "\n" not in str(caught.value)


def report(ctx: RunContext) -> None:
    return None


def test_the_registry_takes_a_list_and_the_spec_round_trips() -> None:
    jobs = Registry()
    jobs.cron(["0 9 * * *", {"schedule": "0 18 * * *", "payload": {"k": "v"}}], max_runs=4)(report)
    (made,) = jobs.specs()
    assert made.max_runs == 4 and len(made.parsed_schedule().entries) == 2
    assert made.validated() == made
    assert parse_schedule(made.schedule).expr == made.schedule
