"""The constraints between a job's options: what ``JobSpec.build`` checks of the options
that depend on each other or on the schedule (the handler and its timeout, overlap, jitter,
calendars, zones, chains, payloads and their schema, expectations, watch jobs), once every
option that stands alone was parsed (its ``parse``, cluster/jobs/spec.py)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs import gates, schedules, shellrefs
from cluster.jobs.expectations import expectations
from cluster.jobs.fields import (
    DEFAULT_TIMEOUT_S,
    duration_field,
    each_zone_flag,
    flag,
    parse_overlap,
    parse_payload,
    validate_handler,
    validate_name,
)
from cluster.jobs.handlerrefs import canonical
from cluster.jobs.payloads import check_payload, parse_payload_schema
from cluster.jobs.timerules import calendar_fields
from cluster.timing.jitter import check_jitter
from cluster.timing.schedule import ENDED, Schedule


def constrained(
    parsed: Schedule,
    handler: str | Mapping[str, Any] | None,
    raw: Mapping[str, Any],
    values: Mapping[str, Any],
) -> dict[str, Any]:
    """The options checked together, by field name: ``raw`` holds every option by key as
    given (else its default), ``values`` the fields that stand alone, parsed. Raises
    ``InvalidInput`` naming the first bad one."""
    timeout_s = values.get("timeout_s", DEFAULT_TIMEOUT_S)
    watch = flag(raw["watch"], "watch")
    # A job file's {http: ...}, {celery: ...} or {shell: ...} becomes text.
    if watch and handler in (None, ""):
        handler = ""  # a watch job needs one only to be adopted
    elif handler is None:
        raise InvalidInput("handler", "missing")
    elif isinstance(handler, Mapping) and set(handler) == {"shell"}:
        handler = shellrefs.canonical(handler)
    else:
        handler = canonical(handler, timeout_s)
    overlap, max_concurrent = parse_overlap(raw["overlap"], raw["max_concurrent"])
    jitter_s = check_jitter(parsed, duration_field(raw["jitter"], "jitter"))
    if parsed.at is not None and overlap == "allow":
        raise InvalidInput("overlap", "a one-off (@at) job has one slot: allow does not apply")
    calendar = raw["calendar"]
    if calendar is not None:
        calendar = validate_name(calendar, "calendar")
    calendar, on_excluded, business_day = calendar_fields(
        parsed, calendar, raw["on_excluded"], raw["business_day"]
    )
    zones = values.get("zones", ())
    each_zone = each_zone_flag(raw["each_zone"], zones)
    if calendar is not None and each_zone:
        raise InvalidInput("calendar", "does not apply to an --each-zone job")
    if calendar is not None and parsed.ends:
        raise InvalidInput("calendar", "does not apply to schedules that all end")
    after, after_match = raw["after"], raw["after_match"]
    if parsed.chain:
        after, after_match = gates.chained(parsed, after, after_match, overlap, jitter_s, calendar)
        if each_zone:
            raise InvalidInput("schedule", "a chained (@after:) job cannot run --each-zone")
    elif after_match == gates.CHAIN:
        raise InvalidInput("after_match", "chain is for a chained schedule (@after:A)")
    payload = parse_payload(raw["payload"])
    schema = parse_payload_schema(raw["payload_schema"])
    check_payload(schema, payload)
    for entry in parsed.entries:  # each schedule's payload runs merged over the job's
        check_payload(schema, schedules.effective_payload(payload, entry))
    if parsed.entries:
        now = datetime.now(UTC)
        if parsed.ends and parsed.next_after(now) >= ENDED:
            raise InvalidInput("schedules", "every schedule has ended: the job would never run")
        schedules.check_collisions(parsed, payload, now)
    expected = expectations(
        raw["expect_max"],
        raw["expect_min"],
        raw["deadline"],
        raw["expect_baseline"],
        raw["asserts"],
        raw["assert_fails"],
    )
    if watch:
        _check_watch(parsed, zones, each_zone, overlap, raw["max_runs"])
    if values.get("each_node", False):
        _check_each_node(parsed, raw, each_zone, overlap, watch)
        if values.get("uses"):  # a member's run takes no key: the limit would not hold
            raise InvalidInput("each_node", "named limits (uses) do not apply to every-node runs")
    return dict(
        schedule=parsed.expr,
        handler=validate_handler(handler) if handler else "",
        tz=parsed.tz,
        payload=payload,
        dst_repeated=parsed.dst_repeated,
        dst_skipped=parsed.dst_skipped,
        overlap=overlap,
        max_concurrent=max_concurrent,
        each_zone=each_zone,
        jitter_s=jitter_s,
        calendar=calendar,
        on_excluded=on_excluded,
        business_day=business_day,
        after=gates.parse_after(after),
        after_match=gates.parse_match(after_match),
        payload_schema=schema,
        max_runs=schedules.check_max_runs(raw["max_runs"], parsed, overlap, each_zone),
        expect_max_s=expected.expect_max_s,
        expect_min_s=expected.expect_min_s,
        deadline=expected.deadline,
        expect_baseline=expected.expect_baseline,
        asserts=expected.asserts,
        assert_fails=expected.assert_fails,
        watch=watch,
    )


def _check_watch(
    parsed: Schedule, zones: tuple[str, ...], each_zone: bool, overlap: str, max_runs: object
) -> None:
    """What a watch job cannot be: it has no node to run on, and pings come for recurring
    slots one at a time (docs/jobs.md, "Watch jobs"). Its pings are not the runs max_runs
    counts (a node's completion counts them): accepted, it never made the job done."""
    if parsed.at is not None:
        raise InvalidInput("watch", "a one-off (@at) job cannot be watched")
    if zones or each_zone:
        raise InvalidInput("watch", "a watch job runs on no node: zones do not apply")
    if overlap == "allow":
        raise InvalidInput("watch", "a watch job records one run per slot: allow does not apply")
    if max_runs is not None:
        raise InvalidInput(
            "watch", "a watch job's pings are not counted: max_runs applies once adopted"
        )


def _check_each_node(
    parsed: Schedule, raw: Mapping[str, Any], each_zone: bool, overlap: str, watch: bool
) -> None:
    """What an each-node job cannot honour: one run per live member per slot, each on its
    own member, the slot closed once every member's run ended (docs/design/each-node.md)."""
    if parsed.chain:
        raise InvalidInput("each_node", "a chained (@after:) job cannot run on every node")
    if parsed.at is not None:
        raise InvalidInput("each_node", "a one-off (@at) job cannot run on every node")
    if each_zone:
        raise InvalidInput("each_node", "with each_zone: choose every node or every zone")
    if watch:
        raise InvalidInput("each_node", "a watch job runs on no node")
    if overlap != "forbid":
        raise InvalidInput("each_node", f"one run per node: overlap {overlap} does not apply")
    if raw["max_runs"] is not None:
        raise InvalidInput("each_node", "max_runs does not apply to an every-node job")
    if raw["remove_when_done"] is True:
        raise InvalidInput("each_node", "remove_when_done does not apply to an every-node job")
