"""A finished run's metrics checked against its job's ``--assert`` (``cluster.jobs.assertions``),
before its completion is planned: a failed check fails the run (``--assert-fails``) or
travels with the completion, which raises ``assertion_failed`` in the statement that writes
the run (tests/unit/test_checks.py). Jobs without checks skip this at one attribute test.
"""

from __future__ import annotations

from cluster.errors import InvalidInput
from cluster.jobs.assertions import failure
from cluster.jobs.models import RunStatus
from cluster.store.lock.records import ClaimedJob
from node.handlers.context import Outcome


def checked(job: ClaimedJob, outcome: Outcome) -> tuple[Outcome, str | None]:
    """The outcome to record, and why the checks failed when that is to be alerted."""
    if job.asserts is None or outcome.status != RunStatus.SUCCEEDED:
        return outcome, None
    try:
        why = failure(job.asserts, outcome.metrics or {})
    except InvalidInput as exc:  # stored by a release with another grammar
        why = f"cannot check {job.asserts!r}: {exc.problem}"
    if why is None:
        return outcome, None
    if job.assert_fails:
        return outcome._replace(status="failed", error=f"assertion failed: {why}"), None
    return outcome, why
