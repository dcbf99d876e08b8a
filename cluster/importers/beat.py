"""``pulse import celery-beat``: a Celery app's ``beat_schedule`` as Pulse jobs.

The app is found by name as ``celery -A`` finds it (``proj``, ``proj.celery`` or
``proj.celery:app``, from the current directory first, with Celery's own ``find_app``):
importing it runs its code, so name only a module you would start beat with. The
schedule is the app's ``conf.beat_schedule``, or a ``beat_schedule`` dict in the module (a
Celery config module). Each entry becomes a ``celery:`` job sending its task by name, in
the app's ``timezone``:

- ``crontab(...)``: its expanded fields as a 5-field cron line. Celery runs a crontab that
  restricts both ``day_of_month`` and ``day_of_week`` on days matching *both*, cron on days
  matching *either*, so such an entry is refused rather than imported with other days;
- a number of seconds, a ``timedelta`` or ``schedule(run_every=...)``: ``@every Ns``;
- ``solar(...)`` is refused (Pulse has no sunrise); any other schedule class too.

``kwargs`` become the payload (a ``celery:`` run sends its payload as the task's keyword
arguments); positional ``args`` cannot be sent so and are refused; ``options.queue`` is the
target queue; other options are listed. Celery is the optional extra ``pulsecron[celery]``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from cluster.errors import InvalidInput
from cluster.importers.imported import Imported, Options
from cluster.timing.durations import format_duration

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day_of_month", 1, 31),
    ("month_of_year", 1, 12),
    ("day_of_week", 0, 6),
)
_ENTRY_KEYS = {"task", "schedule", "args", "kwargs", "options", "relative"}


def _ranges(values: set[int], low: int, high: int) -> str:
    """``{0, 15, 30, 45}`` as ``0,15,30,45``, ``{9..17}`` as ``9-17``, the full range ``*``."""
    if values == set(range(low, high + 1)):
        return "*"
    ordered, parts = sorted(values), []
    start = prev = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ",".join(parts)


def _cron(schedule: Any) -> str:
    """A Celery ``crontab`` as a 5-field line; ``ValueError`` for one cron reads otherwise."""
    fields = [_ranges(set(getattr(schedule, f)), low, high) for f, low, high in _FIELDS]
    if fields[2] != "*" and fields[4] != "*":
        raise ValueError(
            "crontab restricts both day_of_month and day_of_week: Celery runs on days matching "
            "both, cron on days matching either; split it into two entries"
        )
    return " ".join(fields)


def _every(value: float) -> str:
    if value <= 0 or value != int(value):
        raise ValueError(f"every {value:g}s: Pulse schedules whole seconds, at least 1")
    return f"@every {format_duration(value)}"


def _schedule(value: Any) -> str:
    """The Pulse schedule of a beat entry's ``schedule``; ``ValueError`` says why not."""
    schedules = importlib.import_module("celery.schedules")
    if isinstance(value, bool):
        raise ValueError("schedule must be a number, a timedelta, crontab(...) or schedule(...)")
    if isinstance(value, int | float):
        return _every(float(value))
    if isinstance(value, timedelta):
        return _every(value.total_seconds())
    if isinstance(value, schedules.solar):
        raise ValueError("solar schedules are refused: Pulse has no sunrise or sunset events")
    if isinstance(value, schedules.crontab):
        return _cron(value)
    if type(value) is schedules.schedule:
        return _every(value.run_every.total_seconds())
    raise ValueError(f"{type(value).__name__} schedules are not mapped")


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


def _config_module(name: str) -> Any:
    """A Celery config module (``beat_schedule`` at its top level), or None."""
    try:
        module = importlib.import_module(name)
    except Exception:  # the module's own code ran: any error is its
        return None
    return module if isinstance(getattr(module, "beat_schedule", None), Mapping) else None


def load_schedule(reference: str) -> tuple[Mapping[str, Any], str | None]:
    """The beat schedule and time zone of the app ``reference`` names, found as ``celery
    -A`` finds it (Celery's ``find_app``: ``proj``, ``proj.celery``, ``proj:app``), or of a
    config module holding a ``beat_schedule`` dict."""
    module_name, _, attribute = reference.partition(":")
    if not module_name:
        raise InvalidInput("module", "give a module name (proj.celery or proj.celery:app)")
    utils = importlib.import_module("celery.app.utils")
    try:
        if attribute and not hasattr(utils.import_from_cwd(module_name), attribute):
            raise InvalidInput("module", f"{module_name} has no attribute {attribute!r}")
        found = utils.find_app(reference)
    except InvalidInput:
        raise
    except Exception as exc:  # the module's own code ran: any error is its
        found = None if attribute else _config_module(module_name)
        if found is None:
            raise InvalidInput("module", f"cannot load {reference!r}: {_first_line(exc)}") from exc
    conf = getattr(found, "conf", None)
    if conf is not None:
        return dict(conf.beat_schedule or {}), conf.timezone
    schedule = getattr(found, "beat_schedule", None)
    if isinstance(schedule, Mapping):
        return schedule, getattr(found, "timezone", None)
    raise InvalidInput("module", f"{reference} is neither a Celery app nor a beat_schedule module")


def _entry(result: Imported, key: str, entry: Any, tz: str | None, broker: str | None) -> None:
    where = f"entry {key!r}"
    if not isinstance(entry, Mapping) or "task" not in entry or "schedule" not in entry:
        result.problem(where, "not a beat entry (a mapping with task and schedule)")
        return
    try:
        schedule = _schedule(entry["schedule"])
    except ValueError as exc:
        result.problem(where, str(exc))
        return
    if entry.get("args"):
        result.problem(
            where,
            "positional args are refused: a celery: job sends its payload as keyword "
            "arguments; give them as kwargs",
        )
        return
    celery: dict[str, Any] = {"task": entry["task"]}
    if broker:
        celery["broker"] = broker
    options = dict(entry.get("options") or {})
    if options.get("queue"):
        celery["queue"] = str(options.pop("queue"))
    for option in sorted(options):
        result.problem(where, f"option {option!r} is not mapped")
    for extra in sorted(set(entry) - _ENTRY_KEYS):
        result.problem(where, f"key {extra!r} is not mapped")
    job: dict[str, Any] = {
        "name": result.name(key),
        "schedule": schedule,
        "handler": {"celery": celery},
    }
    if tz:
        job["tz"] = tz
    kwargs = entry.get("kwargs") or {}
    if kwargs:
        try:
            job["payload"] = json.loads(json.dumps(dict(kwargs)))
        except (TypeError, ValueError):
            result.problem(where, "kwargs are not JSON: not imported")
            return
    result.add(where, job)


def import_beat(reference: str, options: Options, broker: str | None = None) -> Imported:
    """The jobs of the beat schedule of ``reference``; entries not mapped are listed."""
    try:
        importlib.import_module("celery.schedules")
    except ImportError as exc:
        raise InvalidInput("module", "Celery is not installed (pulsecron[celery])") from exc
    schedule, tz = load_schedule(reference)
    result = Imported(reference, options.checked())
    for key, entry in schedule.items():
        _entry(result, str(key), entry, str(tz) if tz else None, broker)
    return result
