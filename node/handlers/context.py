"""The context a handler receives and the outcome a run produces, for every kind of handler.

A handler that raises, times out, cannot be imported or calls ``sys.exit`` produces an
``Outcome``; it never brings the node down (tests/unit/test_executor.py). The outcome
carries what the run produced (``node.handlers.output``): a Python handler's return value
and ``ctx.log`` lines, or a shell command's stdout and stderr
(tests/unit/test_handler_output.py). A cancelled run (``pulse runs cancel``, overlap
``replace``) sets ``ctx.cancelled``.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

from cluster.errors import InvalidInput
from cluster.jobs.assertions import MAX_METRICS, metric_name, metric_value
from cluster.jobs.fields import DEFAULT_CANCEL_GRACE_S, DEFAULT_OUTPUT_LIMIT
from node.handlers.output import RunLog, compose, storable

if TYPE_CHECKING:
    from node.handlers.effects import Effects, RunTransaction

MAX_ERROR_CHARS = 2000
MAX_STATE_BYTES = 64 * 1024


def state_text(state: dict[str, Any]) -> str:
    """``ctx.state`` as the JSON text the completion writes; ``ValueError`` if it is not JSON."""
    try:
        return json.dumps(state, ensure_ascii=False, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"ctx.state is not a JSON object ({exc})") from exc


_CANCEL_LOCK = threading.Lock()  # a context's lazily made parts, made once


@dataclass(frozen=True)
class RunContext:
    """What a handler is told about the slot it runs."""

    job_id: UUID
    job_name: str
    tenant_id: str
    payload: dict[str, Any]
    scheduled_for: datetime
    attempt: int
    timeout_s: float
    node_id: str
    zone: str
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    # Increases with every claim of the job: stamp it on writes to other systems and refuse
    # writes that carry a lower one, so a run whose lease was taken over is fenced there too.
    fencing_token: int = 0
    cancel_grace_s: float = DEFAULT_CANCEL_GRACE_S
    effects: Effects | None = field(default=None, repr=False, compare=False)
    # Incremental runs (docs/jobs.md): read at claim. `state` is what the job's last
    # successful run left; a successful run's changes (in place, or set_state) are written
    # by its fenced completion, so a retry or a lost lease never advances it twice.
    previous_slot: datetime | None = None
    last_success_slot: datetime | None = None
    state: dict[str, Any] = field(default_factory=dict, compare=False)
    # The W3C traceparent of this attempt's span when the node traces (--otel), else None:
    # pass it on to what the handler calls (node.handlers.traces).
    traceparent: str | None = None
    # A job with several schedules: the 1-based number of the entry this slot comes from
    # (its payload is merged into `payload`); None for one schedule.
    schedule_entry: int | None = None
    _state_read: str = field(default="", init=False, repr=False, compare=False)
    _log: RunLog = field(init=False, repr=False, compare=False)
    # Made on first use (few runs are ever cancelled; an Event costs a lock and a condition).
    _cancelled: threading.Event | None = field(default=None, init=False, repr=False, compare=False)
    # Set by the executor once the run's outcome is reported (node.handlers.effects reads it).
    _reported: bool = field(default=False, init=False, repr=False, compare=False)
    _transaction_used: bool = field(default=False, init=False, repr=False, compare=False)
    # ctx.metric's figures, made on first use (most runs report none).
    _metrics: dict[str, float] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_log", RunLog(self.output_limit))
        if self.state:
            object.__setattr__(self, "_state_read", state_text(self.state))

    def set_state(self, state: dict[str, Any]) -> None:
        """Replace ``ctx.state``; written if this run succeeds."""
        if not isinstance(state, dict):
            raise TypeError("ctx.state must be a JSON object (a dict)")
        object.__setattr__(self, "state", state)

    def _changed_state(self) -> str | None:
        """``state`` as JSON text if the run changed it, else None; ``ValueError`` if it is
        not JSON or larger than ``MAX_STATE_BYTES``."""
        if not self.state and not self._state_read:  # most jobs keep none: no encoding
            return None
        text = state_text(self.state)
        if text == (self._state_read or "{}"):
            return None
        if len(text.encode()) > MAX_STATE_BYTES:
            raise ValueError(f"ctx.state is larger than {MAX_STATE_BYTES // 1024} KiB")
        return text

    @property
    def cancelled(self) -> threading.Event:
        """Set when the run is asked to stop: a sync handler waits on it or checks it."""
        found = self._cancelled
        if found is None:
            with _CANCEL_LOCK:
                found = self._cancelled
                if found is None:
                    found = threading.Event()
                    object.__setattr__(self, "_cancelled", found)
        return found

    @property
    def reported(self) -> bool:
        return self._reported

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled is not None and self._cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise ``RunCancelled`` if the run was asked to stop; the run is then recorded
        ``cancelled`` (and not retried)."""
        if self.is_cancelled:
            raise RunCancelled("the run was cancelled")

    def transaction(self) -> RunTransaction:
        """``async with ctx.transaction() as conn`` (``with`` in a sync handler): a psycopg
        connection to Pulse's database in a transaction committed together with this run's
        fenced completion, and only if the run succeeds and still holds its lease; else
        rolled back. See docs/design/effects.md."""
        if self.effects is None:
            raise RuntimeError("ctx.transaction() needs a run started by a Pulse node")
        with _CANCEL_LOCK:
            if self._transaction_used:
                raise RuntimeError("ctx.transaction() may be used once per run")
            object.__setattr__(self, "_transaction_used", True)
        return self.effects.transaction(self)

    def metric(self, name: str, value: float) -> None:
        """Keep a figure with the run (``pulse runs show``), checked by the job's
        ``--assert``: a name of lowercase letters, digits, ``_`` and ``.``, a finite number;
        the last value of a name counts, at most 32 names per run. ``ValueError`` if bad."""
        try:
            name = metric_name(name)
            number = metric_value(value, name)
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None
        with _CANCEL_LOCK:
            found = self._metrics
            if found is None:
                found = {}
                object.__setattr__(self, "_metrics", found)
            if name not in found and len(found) >= MAX_METRICS:
                raise ValueError(f"metric: at most {MAX_METRICS} metrics per run")
            found[name] = number

    def log(self, message: str) -> None:
        """Add a line to the run's recorded output (``pulse runs show``); from any thread.
        The newest lines within the job's output limit are kept."""
        self._log.add(message)

    @property
    def idempotency_key(self) -> str:
        """``<job id>:<slot>``: the same for every attempt of a slot."""
        return f"{self.job_id}:{self.scheduled_for.isoformat()}"

    @property
    def deadline(self) -> datetime:
        """When the run times out, counted from its slot."""
        return self.scheduled_for + timedelta(seconds=self.timeout_s)


class Outcome(NamedTuple):
    """How a run ended."""

    status: str  # succeeded | failed | timed_out | cancelled | skipped (pulsecron.Skip)
    error: str | None
    duration_s: float
    output: str | None = None  # JSON text of the run's output object (node.handlers.output.compose)
    state: str | None = None  # ctx.state as JSON text, when a successful run changed it
    metrics: dict[str, float] | None = None  # what the run reported (ctx.metric)


class RunCancelled(Exception):
    """Raised by ``ctx.raise_if_cancelled()`` in a run that was asked to stop."""


def cancelled(ctx: RunContext, by: str, duration_s: float, note: str = "") -> Outcome:
    return Outcome("cancelled", f"cancelled by {by}{note}", duration_s, output_of(ctx))


class Skip(Exception):
    """Raised by a handler to record its slot ``skipped`` with the given reason: not
    retried, not counted toward auto-pause, a ``skipped`` alert naming the reason."""


class HandlerError(Exception):
    """The handler reference cannot be resolved."""


# Runs an http: or celery: handler (node.handlers.forwarding); passed in, so this module needs none.
Forward = Callable[[str, "RunContext", float], Awaitable[Outcome]]


def error_text(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"handler called sys.exit({exc.code!r})"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return storable(text[-MAX_ERROR_CHARS:])[0]  # NUL or a lone surrogate would fail the write


def finished(
    ctx: RunContext, error: BaseException | None, duration_s: float, result: Any = None
) -> Outcome:
    """The outcome of a Python handler that returned ``result`` (``error`` None) or raised,
    with what it logged."""
    if error is None:
        try:
            state = ctx._changed_state()
        except ValueError as exc:  # the run's work is done, but its cursor cannot be kept
            return Outcome("failed", str(exc), duration_s, output_of(ctx, result))
        output = output_of(ctx, result)
        return Outcome("succeeded", None, duration_s, output, state, ctx._metrics)
    if isinstance(error, Skip):
        reason = storable(str(error)[-MAX_ERROR_CHARS:] or "skipped by its handler")[0]
        return Outcome("skipped", reason, duration_s, output_of(ctx))
    return Outcome("failed", error_text(error), duration_s, output_of(ctx))


def timed_out(ctx: RunContext, timeout_s: float, duration_s: float) -> Outcome:
    return Outcome("timed_out", f"timed out after {timeout_s:g}s", duration_s, output_of(ctx))


def output_of(ctx: RunContext, result: Any = None) -> str | None:
    return compose(result=result, log=ctx._log, metrics=ctx._metrics, limit=ctx.output_limit)
