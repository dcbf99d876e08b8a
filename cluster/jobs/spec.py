"""A job's definition as users write it, validated before anything touches the database.

The same rules serve ``pulse jobs add``, ``pulse jobs apply FILE`` and the Python API, so
bad input is rejected the same way everywhere: one ``InvalidInput`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs import gates, schedules, shellrefs
from cluster.jobs.expectations import expectations
from cluster.jobs.fields import (
    DEFAULT_CANCEL_GRACE_S,
    DEFAULT_CATCH_UP,
    DEFAULT_DST_REPEATED,
    DEFAULT_DST_SKIPPED,
    DEFAULT_GRACE_S,
    DEFAULT_LATE_AFTER_S,
    DEFAULT_MAX_BACKFILL,
    DEFAULT_MAX_CONCURRENT,
    DEFAULT_OUTPUT_LIMIT,
    DEFAULT_OVERLAP,
    DEFAULT_RETRIES,
    DEFAULT_RETRY_BACKOFF_S,
    DEFAULT_TENANT,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TZ,
    MAX_OUTPUT_LIMIT,
    count_field,
    duration_field,
    each_zone_flag,
    optional_duration,
    parse_overlap,
    parse_payload,
    parse_size,
    parse_zones,
    validate_handler,
    validate_name,
)
from cluster.jobs.handlerrefs import canonical
from cluster.jobs.labels import parse_labels as labels_of
from cluster.jobs.payloads import check_payload, parse_payload_schema
from cluster.jobs.timerules import DEFAULT_ON_EXCLUDED, calendar_fields
from cluster.timing.catchup import parse_catch_up
from cluster.timing.jitter import check_jitter
from cluster.timing.schedule import ENDED, Schedule, parse_schedule


@dataclass(frozen=True)
class JobSpec:
    """One validated job definition; build it with ``JobSpec.build`` or ``from_mapping``."""

    name: str
    schedule: str
    handler: str
    tenant: str = DEFAULT_TENANT
    tz: str = DEFAULT_TZ
    payload: dict[str, Any] = field(default_factory=dict)
    catch_up: str = DEFAULT_CATCH_UP
    grace_s: float = DEFAULT_GRACE_S
    max_backfill: int = DEFAULT_MAX_BACKFILL
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    paused: bool = False
    dst_repeated: str = DEFAULT_DST_REPEATED
    dst_skipped: str = DEFAULT_DST_SKIPPED
    keep_for_s: float | None = None  # None: the cluster's retention
    keep_runs: int | None = None
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    late_after_s: float = DEFAULT_LATE_AFTER_S
    pause_after_failures: int | None = None
    overlap: str = DEFAULT_OVERLAP
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    cancel_grace_s: float = DEFAULT_CANCEL_GRACE_S
    zones: tuple[str, ...] = ()  # pinned to these zones (docs/zones.md); empty: any zone
    each_zone: bool = False  # one run per slot in every zone with a live node (of `zones`)
    jitter_s: float = 0.0  # each slot starts within [slot, slot + jitter) (cluster.timing.jitter)
    remove_when_done: bool = False  # a one-off (@at) job is deleted once its slot has run
    # A business calendar by name (docs/time.md): what its excluded slots do, and
    # "the n-th business day of the month" (negative: from its end).
    calendar: str | None = None
    on_excluded: str = DEFAULT_ON_EXCLUDED
    business_day: int | None = None
    after: tuple[str, ...] = ()  # upstream jobs of the same tenant (cluster.jobs.gates)
    after_match: str = gates.DEFAULT_MATCH
    after_timeout_s: float | None = None  # a slot held longer is skipped; None: no limit
    after_failure: str = gates.DEFAULT_FAILURE
    payload_schema: dict[str, Any] | None = None  # a JSON Schema (cluster.jobs.payloads)
    max_runs: int | None = None  # done after this many runs (cluster.jobs.schedules)
    labels: dict[str, str] = field(default_factory=dict)  # key=value (cluster.jobs.labels)
    # Expectations of each run (cluster.jobs.expectations, docs/jobs.md).
    expect_max_s: float | None = None
    expect_min_s: float | None = None
    deadline: str | None = None  # HH:MM in the job's zone
    expect_baseline: float | None = None  # times the p95 of its kept successful runs
    asserts: str | None = None  # checks of the run's metrics (cluster.jobs.assertions)
    assert_fails: bool = False
    # Never run by Pulse: its runs come from pings (docs/jobs.md, "Watch jobs"); its handler,
    # if any, is what Pulse runs once the job is adopted.
    watch: bool = False

    @classmethod
    def build(
        cls,
        name: str,
        schedule: str | Sequence[str | Mapping[str, Any]],
        handler: str | Mapping[str, Any] | None,
        *,
        tenant: str = DEFAULT_TENANT,
        tz: str = DEFAULT_TZ,
        payload: str | Mapping[str, Any] | None = None,
        catch_up: str = DEFAULT_CATCH_UP,
        grace: str | float = DEFAULT_GRACE_S,
        max_backfill: int | str = DEFAULT_MAX_BACKFILL,
        timeout: str | float = DEFAULT_TIMEOUT_S,
        retries: int | str = DEFAULT_RETRIES,
        retry_backoff: str | float = DEFAULT_RETRY_BACKOFF_S,
        paused: bool = False,
        dst_repeated: str = DEFAULT_DST_REPEATED,
        dst_skipped: str = DEFAULT_DST_SKIPPED,
        keep_for: str | float | None = None,
        keep_runs: int | str | None = None,
        output_limit: int | str = DEFAULT_OUTPUT_LIMIT,
        late_after: str | float = DEFAULT_LATE_AFTER_S,
        pause_after_failures: int | str | None = None,
        overlap: str = DEFAULT_OVERLAP,
        max_concurrent: int | str | None = None,
        cancel_grace: str | float = DEFAULT_CANCEL_GRACE_S,
        zones: str | Sequence[str] | None = None,
        each_zone: bool = False,
        jitter: str | float = 0.0,
        remove_when_done: bool = False,
        calendar: str | None = None,
        on_excluded: str = DEFAULT_ON_EXCLUDED,
        business_day: int | str | None = None,
        after: str | Sequence[str] | None = None,
        after_match: str = gates.DEFAULT_MATCH,
        after_timeout: str | float | None = None,
        after_failure: str = gates.DEFAULT_FAILURE,
        payload_schema: str | Mapping[str, Any] | None = None,
        max_runs: int | str | None = None,
        labels: Mapping[str, str] | str | Sequence[str] | None = None,
        expect_max: str | float | None = None,
        expect_min: str | float | None = None,
        deadline: str | None = None,
        expect_baseline: str | float | None = None,
        asserts: str | None = None,
        assert_fails: bool = False,
        watch: bool = False,
    ) -> JobSpec:
        """Validate every field; raise ``InvalidInput`` naming the first bad one."""
        name = validate_name(name)
        tenant = validate_name(tenant, "tenant")
        schedule = schedules.schedule_text(schedule)
        if not isinstance(tz, str):
            raise InvalidInput("tz", "must be a string")
        parsed = parse_schedule(schedule, tz, dst_repeated, dst_skipped)  # type: ignore[arg-type]
        timeout_s = duration_field(timeout, "timeout")
        if timeout_s <= 0:
            raise InvalidInput("timeout", "must be positive")
        if not isinstance(watch, bool):
            raise InvalidInput("watch", "must be true or false")
        # A job file's {http: ...}, {celery: ...} or {shell: ...} becomes text.
        if watch and handler in (None, ""):
            handler = ""  # a watch job needs one only to be adopted
        elif handler is None:
            raise InvalidInput("handler", "missing")
        elif isinstance(handler, Mapping) and set(handler) == {"shell"}:
            handler = shellrefs.canonical(handler)
        else:
            handler = canonical(handler, timeout_s)
        if not isinstance(paused, bool):
            raise InvalidInput("paused", "must be true or false")
        limit = parse_size(output_limit, "output_limit")
        if not 0 <= limit <= MAX_OUTPUT_LIMIT:
            raise InvalidInput(
                "output_limit", f"must be between 0 and {MAX_OUTPUT_LIMIT // 1024}KiB"
            )
        late_after_s = optional_duration(late_after, "late_after")
        assert late_after_s is not None
        overlap, max_concurrent = parse_overlap(overlap, max_concurrent)
        jitter_s = check_jitter(parsed, duration_field(jitter, "jitter"))
        if parsed.at is not None and overlap == "allow":
            raise InvalidInput("overlap", "a one-off (@at) job has one slot: allow does not apply")
        if not isinstance(remove_when_done, bool):
            raise InvalidInput("remove_when_done", "must be true or false")
        if calendar is not None:
            calendar = validate_name(calendar, "calendar")
        calendar, on_excluded, business_day = calendar_fields(
            parsed, calendar, on_excluded, business_day
        )
        if calendar is not None and each_zone:
            raise InvalidInput("calendar", "does not apply to an --each-zone job")
        if calendar is not None and parsed.ends:
            raise InvalidInput("calendar", "does not apply to schedules that all end")
        if parsed.chain:
            after, after_match = gates.chained(
                parsed, after, after_match, overlap, jitter_s, calendar
            )
            if each_zone:
                raise InvalidInput("schedule", "a chained (@after:) job cannot run --each-zone")
        elif after_match == gates.CHAIN:
            raise InvalidInput("after_match", "chain is for a chained schedule (@after:A)")
        payload = parse_payload(payload)
        schema = parse_payload_schema(payload_schema)
        check_payload(schema, payload)
        for entry in parsed.entries:  # each schedule's payload runs merged over the job's
            check_payload(schema, schedules.effective_payload(payload, entry))
        if parsed.entries:
            now = datetime.now(UTC)
            if parsed.ends and parsed.next_after(now) >= ENDED:
                raise InvalidInput("schedules", "every schedule has ended: the job would never run")
            schedules.check_collisions(parsed, payload, now)
        expected = expectations(
            expect_max, expect_min, deadline, expect_baseline, asserts, assert_fails
        )
        if watch:
            _check_watch(parsed, zones, each_zone, overlap)
        return cls(
            name=name,
            schedule=parsed.expr,
            handler=validate_handler(handler) if handler else "",
            tenant=tenant,
            tz=parsed.tz,
            payload=payload,
            catch_up=parse_catch_up(catch_up),
            grace_s=duration_field(grace, "grace"),
            max_backfill=count_field(max_backfill, "max_backfill", 1),
            timeout_s=timeout_s,
            retries=count_field(retries, "retries", 0),
            retry_backoff_s=duration_field(retry_backoff, "retry_backoff"),
            paused=paused,
            dst_repeated=parsed.dst_repeated,
            dst_skipped=parsed.dst_skipped,
            keep_for_s=optional_duration(keep_for, "keep_for"),
            keep_runs=None if keep_runs is None else count_field(keep_runs, "keep_runs", 1),
            output_limit=limit,
            late_after_s=late_after_s,
            pause_after_failures=(
                None
                if pause_after_failures is None
                else count_field(pause_after_failures, "pause_after_failures", 1)
            ),
            overlap=overlap,
            max_concurrent=max_concurrent,
            cancel_grace_s=duration_field(cancel_grace, "cancel_grace"),
            zones=parse_zones(zones),
            each_zone=each_zone_flag(each_zone, zones),
            jitter_s=jitter_s,
            remove_when_done=remove_when_done,
            calendar=calendar,
            on_excluded=on_excluded,
            business_day=business_day,
            after=gates.parse_after(after),
            after_match=gates.parse_match(after_match),
            after_timeout_s=optional_duration(after_timeout, "after_timeout"),
            after_failure=gates.parse_failure(after_failure),
            payload_schema=schema,
            max_runs=schedules.check_max_runs(max_runs, parsed, overlap, each_zone),
            labels=labels_of(labels),
            expect_max_s=expected.expect_max_s,
            expect_min_s=expected.expect_min_s,
            deadline=expected.deadline,
            expect_baseline=expected.expect_baseline,
            asserts=expected.asserts,
            assert_fails=expected.assert_fails,
            watch=watch,
        )

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any]) -> JobSpec:
        """From a job-file entry whose keys are the long options with underscores."""
        if not isinstance(entry, Mapping):
            raise InvalidInput("entry", "must be a mapping of option names to values")
        known = {
            "name", "schedule", "handler", "tenant", "tz", "payload", "catch_up", "grace",
            "max_backfill", "timeout", "retries", "retry_backoff", "paused", "dst_repeated",
            "dst_skipped", "keep_for", "keep_runs", "output_limit", "late_after",
            "pause_after_failures", "overlap", "max_concurrent", "cancel_grace",
            "zones", "each_zone",
            "jitter", "remove_when_done", "calendar", "on_excluded", "business_day",
            "after", "after_match", "after_timeout", "after_failure", "payload_schema",
            "schedules", "max_runs", "labels",
            "expect_max", "expect_min", "deadline", "expect_baseline", "assert", "asserts",
            "assert_fails",
            "watch",
        }  # fmt: skip
        unknown = sorted(set(entry) - known)
        if unknown:
            raise InvalidInput(unknown[0], "unknown key")
        if "schedule" in entry and "schedules" in entry:
            raise InvalidInput("schedules", "give schedule or schedules, not both")
        timing = entry.get("schedules", entry.get("schedule"))
        if "schedules" in entry and isinstance(timing, str):
            raise InvalidInput("schedules", "must be a list of schedules")
        for required in ("name", "handler"):
            if required not in entry and not (required == "handler" and entry.get("watch")):
                raise InvalidInput(required, "missing")
        if timing is None:
            raise InvalidInput("schedule", "missing")
        skipped = ("name", "schedule", "schedules", "handler")
        kwargs = {k: v for k, v in entry.items() if k not in skipped}
        if "assert" in kwargs:  # a Python keyword: the argument is `asserts`
            if "asserts" in kwargs:
                raise InvalidInput("assert", "give assert or asserts, not both")
            kwargs["asserts"] = kwargs.pop("assert")
        payload = kwargs.get("payload")
        if payload is not None and not isinstance(payload, Mapping | str):
            raise InvalidInput("payload", "must be a JSON object")
        schema = kwargs.get("payload_schema")
        if schema is not None and not isinstance(schema, Mapping | str):
            raise InvalidInput("payload_schema", "must be a JSON object")
        return cls.build(entry["name"], timing, entry.get("handler"), **kwargs)

    def validated(self) -> JobSpec:
        """This spec checked as ``build`` checks it (``JobSpec(...)`` itself validates nothing)."""
        return JobSpec.build(
            self.name,
            self.schedule,
            self.handler,
            tenant=self.tenant,
            tz=self.tz,
            payload=self.payload,
            catch_up=self.catch_up,
            grace=self.grace_s,
            max_backfill=self.max_backfill,
            timeout=self.timeout_s,
            retries=self.retries,
            retry_backoff=self.retry_backoff_s,
            paused=self.paused,
            dst_repeated=self.dst_repeated,
            dst_skipped=self.dst_skipped,
            keep_for=self.keep_for_s,
            keep_runs=self.keep_runs,
            output_limit=self.output_limit,
            late_after=self.late_after_s,
            pause_after_failures=self.pause_after_failures,
            overlap=self.overlap,
            max_concurrent=self.max_concurrent if self.overlap == "allow" else None,
            cancel_grace=self.cancel_grace_s,
            zones=self.zones or None,
            each_zone=self.each_zone,
            jitter=self.jitter_s,
            remove_when_done=self.remove_when_done,
            calendar=self.calendar,
            on_excluded=self.on_excluded,
            business_day=self.business_day,
            after=self.after or None,
            after_match=self.after_match,
            after_timeout=self.after_timeout_s,
            after_failure=self.after_failure,
            payload_schema=self.payload_schema,
            max_runs=self.max_runs,
            labels=self.labels,
            expect_max=self.expect_max_s,
            expect_min=self.expect_min_s,
            deadline=self.deadline,
            expect_baseline=self.expect_baseline,
            asserts=self.asserts,
            assert_fails=self.assert_fails,
            watch=self.watch,
        )

    def parsed_schedule(self) -> Schedule:
        return parse_schedule(self.schedule, self.tz, self.dst_repeated, self.dst_skipped)  # type: ignore[arg-type]


def _check_watch(
    parsed: Schedule, zones: str | Sequence[str] | None, each_zone: bool, overlap: str
) -> None:
    """What a watch job cannot be: it has no node to run on, and pings come for recurring
    slots one at a time (docs/jobs.md, "Watch jobs")."""
    if parsed.at is not None:
        raise InvalidInput("watch", "a one-off (@at) job cannot be watched")
    if zones or each_zone:
        raise InvalidInput("watch", "a watch job runs on no node: zones do not apply")
    if overlap == "allow":
        raise InvalidInput("watch", "a watch job records one run per slot: allow does not apply")
