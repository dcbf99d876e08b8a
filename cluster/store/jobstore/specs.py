"""What ``JobStore`` writes go through before and after their statements: the results of
``apply`` and ``sync``, the checks of a batch of specs (each valid, each (tenant, name)
once, one error naming every bad entry), and text the driver could not send."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs.fields import DEFAULT_TENANT, check_text
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.timing.schedule import ENDED


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.removed)


MAX_NOTE_LENGTH = 500


def check_params(params: dict[str, Any]) -> None:
    """Text the driver could not send (lone surrogates, NUL) is bad input, not a store error,
    naming the key users wrote (an option's parameter is named after its column)."""
    for param, value in params.items():
        if isinstance(value, str):
            option = OPTIONS.by_column.get(param)
            check_text(value, "job" if param == "job_name" else option.key if option else param)


def past_one_off(spec: JobSpec, params: dict[str, Any], db_now: datetime) -> bool:
    return bool(params["slot_at"] <= db_now and spec.parsed_schedule().at is not None)


def refuse_past(spec: JobSpec, params: dict[str, Any], db_now: datetime) -> None:
    """``InvalidInput`` for a one-off job whose time has passed, or one whose schedules all
    ended (nothing is written: the caller's transaction rolls back)."""
    if params["slot_at"] >= ENDED:
        raise InvalidInput("schedules", f"every schedule ended before {db_now.isoformat()}")
    if past_one_off(spec, params, db_now):
        when = params["slot_at"].isoformat()
        raise InvalidInput("schedule", f"@at {when} is in the past (now {db_now.isoformat()})")


def label_of(tenant: str, name: str) -> str:
    return name if tenant == DEFAULT_TENANT else f"{tenant}/{name}"


def checked(specs: Sequence[JobSpec]) -> list[JobSpec]:
    """Every spec validated, each (tenant, name) once; one error listing every bad entry."""
    checked: list[JobSpec] = []
    problems: list[str] = []
    for position, spec in enumerate(specs, 1):
        try:
            checked.append(spec.validated())
        except InvalidInput as exc:
            problems.append(f"entry {position}: {exc}")
    if problems:
        raise InvalidInput("jobs", "; ".join(problems))
    seen: set[tuple[str, str]] = set()
    for position, spec in enumerate(checked, 1):
        key = (spec.tenant, spec.name)
        if key in seen:
            raise InvalidInput(
                f"entry {position}: name",
                f"{spec.name!r} appears twice in tenant {spec.tenant!r}",
            )
        seen.add(key)
    return checked
