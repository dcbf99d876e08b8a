"""A job's definition as users write it, validated before anything touches the database,
and the declaration of its options (``OPTIONS``: each field's key, flag, parser, column and
lists, cluster/jobs/options.py).

The same rules serve ``pulse jobs add``, ``pulse jobs apply FILE``, the HTTP API and the
Python API, so bad input is rejected the same way everywhere: one ``InvalidInput`` naming
the field. Which keys an entry may give is ``cluster.jobs.entry``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs import gates, schedules
from cluster.jobs.constraints import constrained
from cluster.jobs.entry import EntryKeys
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
    DEFAULT_PRIORITY,
    DEFAULT_RETRIES,
    DEFAULT_RETRY_BACKOFF_S,
    DEFAULT_TENANT,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TZ,
    check_text,
    counts,
    duration_field,
    flag,
    optional_duration,
    output_size,
    parse_zones,
    positive_duration,
    priority_field,
    validate_name,
)
from cluster.jobs.labels import parse_labels
from cluster.jobs.limitkeys import parse_uses
from cluster.jobs.options import Options, option
from cluster.jobs.timerules import DEFAULT_ON_EXCLUDED
from cluster.timing.catchup import parse_catch_up
from cluster.timing.durations import format_duration
from cluster.timing.schedule import Schedule, parse_schedule

_ALL = {"claimed": True, "child": True}  # what a run needs: claimed, and copied to children
MAX_DESCRIPTION_LENGTH = 1000


def _description(value: object, key: str) -> str | None:
    """Free text, at most ``MAX_DESCRIPTION_LENGTH`` characters; blank: none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(key, "must be text")
    text = check_text(value, key).strip()
    if len(text) > MAX_DESCRIPTION_LENGTH:
        raise InvalidInput(key, f"longer than {MAX_DESCRIPTION_LENGTH} characters")
    return text or None


@dataclass(frozen=True)
class JobSpec:
    """One validated job definition; build it with ``JobSpec.build`` or ``from_mapping``.

    Its fields are the declaration of a job's options (cluster/jobs/options.py): an option
    added here is a job-file key, an API key, a ``Registry`` keyword, a ``pulse jobs add``
    flag (with ``help``), a ``Job`` attribute and JSON key, and a column the statements
    write, claim, copy to each-zone children and record in revisions as declared. Those
    with a ``parse`` are checked on their own; the others by ``build`` together with the
    fields they depend on."""

    name: str = option(written=False, recorded=False)
    schedule: str = option(timing=True, **_ALL)
    handler: str = option(**_ALL)
    tenant: str = option(
        DEFAULT_TENANT, parse=validate_name, column="tenant_id", written=False, recorded=False
    )
    tz: str = option(DEFAULT_TZ, help="IANA time zone.", shown=DEFAULT_TZ, timing=True, **_ALL)
    payload: dict[str, Any] = option(
        factory=dict, help="A JSON object passed to the handler.", jsonb=True, child=True
    )
    catch_up: str = option(
        DEFAULT_CATCH_UP,
        help="skip | once | backfill",
        shown=DEFAULT_CATCH_UP,
        parse=lambda value, _: parse_catch_up(value),
        **_ALL,
    )
    grace_s: float = option(
        DEFAULT_GRACE_S,
        duration=True,
        help="Lateness tolerated by skip.",
        shown=format_duration(DEFAULT_GRACE_S),
        parse=duration_field,
        **_ALL,
    )
    max_backfill: int = option(
        DEFAULT_MAX_BACKFILL,
        help="Backfill cap.",
        shown=str(DEFAULT_MAX_BACKFILL),
        parse=counts(1),
        **_ALL,
    )
    timeout_s: float = option(
        DEFAULT_TIMEOUT_S,
        duration=True,
        help="Per-run time limit.",
        shown=format_duration(DEFAULT_TIMEOUT_S),
        parse=positive_duration,
        **_ALL,
    )
    retries: int = option(
        DEFAULT_RETRIES,
        help="Retries of a slot.",
        shown=str(DEFAULT_RETRIES),
        parse=counts(0),
        column="max_retries",
        **_ALL,
    )
    retry_backoff_s: float = option(
        DEFAULT_RETRY_BACKOFF_S,
        duration=True,
        help="First retry delay.",
        shown=format_duration(DEFAULT_RETRY_BACKOFF_S),
        parse=duration_field,
        **_ALL,
    )
    paused: bool = option(False, help="Create the job paused.", parse=flag, child=True)
    dst_repeated: str = option(
        DEFAULT_DST_REPEATED,
        help="once | twice",
        shown=DEFAULT_DST_REPEATED,
        timing=True,
        **_ALL,
    )
    dst_skipped: str = option(
        DEFAULT_DST_SKIPPED, help="shift | skip", shown=DEFAULT_DST_SKIPPED, timing=True, **_ALL
    )
    # None: the cluster's retention (docs/retention.md).
    keep_for_s: float | None = option(
        None,
        duration=True,
        help="Keep runs this long [default: cluster config].",
        parse=optional_duration,
        child=True,
    )
    keep_runs: int | None = option(
        None,
        help="Keep at most N runs [default: cluster config].",
        parse=counts(1, optional=True),
        child=True,
    )
    output_limit: int = option(
        DEFAULT_OUTPUT_LIMIT,
        help="Output kept per stream of a run (at most 256KiB).",
        shown=f"{DEFAULT_OUTPUT_LIMIT // 1024}KiB",
        parse=output_size,
        **_ALL,
    )
    late_after_s: float = option(
        DEFAULT_LATE_AFTER_S,
        duration=True,
        help="Alert when a slot starts this late.",
        shown=format_duration(DEFAULT_LATE_AFTER_S),
        parse=positive_duration,
        child=True,
    )
    pause_after_failures: int | None = option(
        None,
        help="Pause after N failed slots in a row.",
        parse=counts(1, optional=True),
        child=True,
    )
    overlap: str = option(
        DEFAULT_OVERLAP,
        help="A slot due while the last runs: forbid (waits) | allow (runs too) | replace.",
        shown=DEFAULT_OVERLAP,
        **_ALL,
    )
    max_concurrent: int = option(
        DEFAULT_MAX_CONCURRENT, help="Slots in flight at once (overlap allow).", child=True
    )
    # Which of its tenant's due slots a claim takes first, highest first; never ahead of
    # another tenant's turn (docs/design/fairness.md, "Priorities").
    priority: int = option(
        DEFAULT_PRIORITY,
        help="Among the tenant's due slots, higher runs first (0-100).",
        shown=str(DEFAULT_PRIORITY),
        parse=priority_field,
        child=True,
    )
    cancel_grace_s: float = option(
        DEFAULT_CANCEL_GRACE_S,
        duration=True,
        help="SIGTERM to SIGKILL on cancel.",
        shown=format_duration(DEFAULT_CANCEL_GRACE_S),
        parse=duration_field,
        **_ALL,
    )
    # Pinned to these zones (docs/zones.md); empty: any zone. Each-zone: one run per slot in
    # every zone with a live node (of `zones`), through a child job per zone. Both are set
    # by the statements that place the job (cluster/store/jobstore/definitions.py).
    zones: tuple[str, ...] = option(
        (),
        help="Run only on nodes of these zones (a,b).",
        parse=lambda value, _: parse_zones(value),
        written=False,
    )
    each_zone: bool = option(
        False, help="Run each slot once in every zone with a live node.", written=False
    )
    # Each slot starts within [slot, slot + jitter) (cluster.timing.jitter).
    jitter_s: float = option(
        0.0,
        duration=True,
        help="Each slot starts within [slot, slot + jitter).",
        shown=format_duration(0.0),
        timing=True,
        **_ALL,
    )
    remove_when_done: bool = option(
        False, help="Delete a one-off job once it has run.", parse=flag
    )  # a one-off (@at) job is deleted once its slot has run
    # A business calendar by name (docs/time.md): what its excluded slots do, and
    # "the n-th business day of the month" (negative: from its end).
    calendar: str | None = option(None, help="A business calendar (pulse calendars).", timing=True)
    on_excluded: str = option(
        DEFAULT_ON_EXCLUDED,
        help="A slot on an excluded date: skip | next-business-day | previous-business-day.",
        shown=DEFAULT_ON_EXCLUDED,
        timing=True,
    )
    business_day: int | None = option(
        None, help="Only the N-th business day of each month (-1: last).", timing=True
    )
    # Upstream jobs of the same tenant (cluster.jobs.gates): edges in job_edges, the gate's
    # options set by their statement; `jobs show` adds them for a job with upstreams.
    after: tuple[str, ...] = option(
        (),
        help="Run a slot only after these jobs' (A,B) succeeded.",
        column=None,
        written=False,
        recorded=False,
        read=False,
    )
    after_match: str = option(
        gates.DEFAULT_MATCH,
        help="Which upstream slot: same | latest | period:day | period:hour.",
        shown=gates.DEFAULT_MATCH,
        column=None,
        written=False,
        recorded=False,
        read=False,
    )
    after_timeout_s: float | None = option(  # a slot held longer is skipped; None: no limit
        None,
        duration=True,
        help="Skip a slot held this long [default: never].",
        parse=optional_duration,
        written=False,
        read=False,
    )
    after_failure: str = option(
        gates.DEFAULT_FAILURE,
        help="An upstream slot failed: block | run | skip.",
        shown=gates.DEFAULT_FAILURE,
        parse=lambda value, _: gates.parse_failure(value),
        written=False,
        read=False,
    )
    payload_schema: dict[str, Any] | None = option(  # a JSON Schema (cluster.jobs.payloads)
        None, help="A JSON Schema every payload of the job must match.", jsonb=True
    )
    max_runs: int | None = option(  # done after this many runs (cluster.jobs.schedules)
        None, help="The job is done after this many runs."
    )
    labels: dict[str, str] = option(  # key=value (cluster.jobs.labels)
        factory=dict,
        help="A key=value label (repeatable).",
        flag="--label",
        multiple=True,
        parse=lambda value, _: parse_labels(value),
        jsonb=True,
        timing=True,  # a window by label may cover the job now, or no longer
        child=True,
    )
    # Expectations of each run (cluster.jobs.expectations, docs/jobs.md), checked together.
    expect_max_s: float | None = option(
        None, duration=True, help="Alert `slow` when a run goes on this long.", child=True
    )
    expect_min_s: float | None = option(
        None, duration=True, help="Alert `too_fast` when a run ends sooner.", child=True
    )
    deadline: str | None = option(  # HH:MM in the job's zone
        None, help="Alert `overdue` when a run goes on past HH:MM (--tz).", child=True
    )
    expect_baseline: float | None = option(  # times the p95 of its kept successful runs
        None, help="Alert `slow` past this factor (3x) of the p95 of its kept runs.", child=True
    )
    asserts: str | None = option(  # checks of the run's metrics (cluster.jobs.assertions)
        None,
        help="Checks of the run's metrics ('rows > 0 and errors == 0'): `assertion_failed`.",
        flag="--assert",
        aliases=("assert",),  # the job files' key before it was `asserts`, still read
        **_ALL,
    )
    assert_fails: bool = option(False, help="A failed --assert fails the run instead.", **_ALL)
    # Never run by Pulse: its runs come from pings (docs/jobs.md, "Watch jobs"); its handler,
    # if any, is what Pulse runs once the job is adopted. Placed by its own statement.
    watch: bool = option(
        False, help="Never run: record the pings of a cron Pulse does not run.", written=False
    )
    # What the job is for, in the user's words: shown by jobs list and show, the API and the
    # console, recorded by revisions; nothing runs on it.
    description: str | None = option(
        None, help="What the job is for (free text).", parse=_description, child=True
    )
    # Named limits it takes while a run is in flight (docs/limits.md): keys of its tenant or
    # cluster-wide ones, which the database checks as it writes the job.
    uses: tuple[str, ...] = option(
        (),
        help="Take these named limits (a,b) for each run (pulse limits).",
        parse=parse_uses,
        child=True,
    )
    # Who may run it over the HTTP API (docs/security.md): a job the API wrote always may; a
    # job of the CLI, a file or a Registry only when it says so here. Not recorded by
    # revisions: it says who may run the job, not what runs.
    api_run: bool = option(
        False,
        help="Let API tokens trigger, rerun, backfill and (with a payload_schema) feed it.",
        parse=flag,
        child=True,
        recorded=False,
    )
    # Each slot runs once on every live member (of `zones`), each run on its own node: the
    # claiming node fans the slot out (docs/design/each-node.md); checked by constraints.
    each_node: bool = option(
        False, help="Run each slot once on every live node (of --zones).", parse=flag, claimed=True
    )

    @classmethod
    def build(
        cls,
        name: str,
        schedule: str | Sequence[str | Mapping[str, Any]],
        handler: str | Mapping[str, Any] | None,
        **options: Any,
    ) -> JobSpec:
        """Validate every field; raise ``InvalidInput`` naming the first bad one. ``options``
        are the job-file keys (``grace="5m"``, ``retries=2``: ``OPTIONS``); one left out
        takes its default."""
        _KEYS.check_options(options)
        raw = {d.key: options.get(d.key, d.default) for d in OPTIONS}
        raw["max_concurrent"] = options.get("max_concurrent")  # None: overlap's default
        values: dict[str, Any] = {"name": validate_name(name)}
        schedule = schedules.schedule_text(schedule)
        tz = raw["tz"]
        if not isinstance(tz, str):
            raise InvalidInput("tz", "must be a string")
        parsed = parse_schedule(schedule, tz, raw["dst_repeated"], raw["dst_skipped"])
        for d in OPTIONS:  # the fields checked on their own
            if d.option.parse is not None and d.key in options:
                values[d.name] = d.option.parse(options[d.key], d.key)
        values.update(constrained(parsed, handler, raw, values))
        return cls(**values)

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any]) -> JobSpec:
        """From a job-file entry (or an API body) whose keys are ``OPTIONS``' keys, with
        ``schedules`` for a list of schedules."""
        name, timing, handler, options = _KEYS.arguments(entry)
        return cls.build(name, timing, handler, **options)

    def validated(self) -> JobSpec:
        """This spec checked as ``build`` checks it (``JobSpec(...)`` itself validates
        nothing): its options that differ from their defaults given to ``build``."""
        given = _KEYS.given(self)
        if self.overlap != "allow":
            given.pop("max_concurrent", None)  # overlap's, not the spec's
        return JobSpec.build(self.name, self.schedule, self.handler, **given)

    def parsed_schedule(self) -> Schedule:
        return parse_schedule(self.schedule, self.tz, self.dst_repeated, self.dst_skipped)  # type: ignore[arg-type]


OPTIONS = Options(JobSpec)
_KEYS = EntryKeys(OPTIONS)
