"""The public API of ``import pulsecron``: its names and their signatures.

A change here is a deliberate change to Pulse's API: update ``EXPECTED`` in the same
commit, and say so in the CHANGELOG. A job's options are declared once, as ``JobSpec``'s
fields (cluster/jobs/spec.py): ``JobSpec`` and ``Job`` are shown here without them, and an
option added there changes neither.
"""

from __future__ import annotations

import inspect
from typing import Any

import pulsecron
from cluster.jobs.spec import OPTIONS
from pulsecron import testing

# The parts of JobStore that docs/python.md offers: ``store.definitions.add(spec)``.
STORE_PARTS = ("definitions", "inputs", "plans", "revisions", "runcontrol", "watch")


def describe() -> dict[str, dict[str, str]]:
    """Each public class: its constructor and public methods' signatures (an error: its
    bases); and each public part of ``JobStore``: its methods' signatures."""
    found: dict[str, dict[str, str]] = {}
    for name in sorted(pulsecron.__all__):
        if name == "__version__":
            continue
        obj = getattr(pulsecron, name)
        entry: dict[str, str] = {}
        if issubclass(obj, BaseException):
            entry["bases"] = ", ".join(b.__name__ for b in obj.__mro__[1:-1])
        else:
            signature = inspect.signature(obj)
            declared = name in ("Job", "JobSpec")
            entry["__init__"] = _without_options(signature) if declared else str(signature)
        found[name] = {**entry, **methods(obj)}
    store = pulsecron.JobStore(None, pulsecron.ClusterSettings())  # type: ignore[arg-type]
    for part in STORE_PARTS:
        found[f"JobStore.{part}"] = methods(type(getattr(store, part)))
    return found


def methods(obj: type) -> dict[str, str]:
    """The public methods of a class, and those a Pulse base class (a mix-in) gives it."""
    own: dict[str, Any] = {}
    for klass in reversed(obj.__mro__):
        if klass.__module__.split(".")[0] in ("cluster", "node", "ring", "pulsecron"):
            own.update(vars(klass))
    found: dict[str, str] = {}
    for attr, value in sorted(own.items()):
        if attr.startswith("_") and attr not in ("__aenter__", "__aexit__"):
            continue
        function: Any = value.__func__ if isinstance(value, classmethod | staticmethod) else value
        if inspect.isfunction(function):
            found[attr] = str(inspect.signature(function))
    return found


def _without_options(signature: inspect.Signature) -> str:
    kept = [p for p in signature.parameters.values() if p.name not in OPTIONS.by_name]
    return str(signature.replace(parameters=kept))


def test_every_option_is_a_keyword_of_the_spec_and_the_read_model() -> None:
    spec = inspect.signature(pulsecron.JobSpec).parameters
    job = inspect.signature(pulsecron.Job).parameters
    assert [d.name for d in OPTIONS] == list(spec)
    assert [d.name for d in OPTIONS.read if d.name not in job] == []


def test_public_names_and_signatures_are_stable() -> None:
    assert describe() == EXPECTED


def test_testing_helpers_are_stable() -> None:
    assert sorted(testing.__all__) == ["arun", "context", "run"]
    assert str(inspect.signature(testing.run)) == (
        "(handler: 'Callable[[RunContext], Any]', ctx: 'RunContext | None' = None, "
        "**context_args: 'Any') -> 'Any'"
    )


def test_version_is_the_distributions() -> None:
    from importlib import metadata

    assert pulsecron.__version__ == metadata.version("pulsecron")


EXPECTED: dict[str, dict[str, str]] = {
    "ApplyResult": {
        "__init__": "(created: 'list[str]' = <factory>, updated: 'list[str]' = <factory>, "
        "unchanged: 'list[str]' = <factory>, removed: 'list[str]' = <factory>) ->"
        " None",
    },
    "ClusterSettings": {
        "__init__": "(database_url: 'str' = 'postgresql://postgres@127.0.0.1:5432/postgres', "
        "redis_url: 'str' = 'redis://127.0.0.1:6379/0', schema: 'str' = 'pulse', "
        "cluster: 'str' = 'pulse') -> None",
        "from_env": "(cls, **overrides: 'str | None') -> 'ClusterSettings'",
        "validate": "(self) -> 'ClusterSettings'",
    },
    "ConfigError": {
        "bases": "PulseError, Exception, BaseException",
    },
    "InvalidInput": {
        "bases": "PulseError, ValueError, Exception, BaseException",
    },
    "Job": {
        "__init__": "(id: 'UUID', status: 'str', shard: 'int', next_run_at: 'datetime | "
        "None', slot_at: 'datetime', attempt: 'int', last_run_at: 'datetime | None', "
        "locked_by: 'str | None', lease_expires_at: 'datetime | None', lease_token: "
        "'int', created_at: 'datetime', updated_at: 'datetime', failed_slots: 'int', "
        "pause_note: 'str | None', cancel_by: 'str | None', calendar_rule: 'str | None' "
        "= None, paused_until: 'datetime | None' = None, revision: 'int' = 1, "
        "runs_done: 'int' = 0, last_success_at: 'datetime | None' = None, "
        "expect_state: 'str | None' = None, expect_state_at: 'datetime | None' = None, "
        "adopt_at: 'datetime | None' = None, timing_from: 'datetime | None' = None) -> None",
        "from_row": "(cls, row: 'dict[str, Any]') -> 'Job'",
        "health": "(self) -> 'dict[str, Any]'",
        "parsed_schedule": "(self) -> 'Schedule'",
        "rule": "(self) -> 'CalendarRule | None'",
        "to_json": "(self) -> 'dict[str, Any]'",
        "walked_schedule": "(self) -> 'Schedule'",
    },
    "JobSpec": {
        "__init__": "() -> None",
        "build": "(cls, name: 'str', schedule: 'str | Sequence[str | Mapping[str, Any]]', "
        "handler: 'str | Mapping[str, Any] | None', **options: 'Any') -> 'JobSpec'",
        "from_mapping": "(cls, entry: 'Mapping[str, Any]') -> 'JobSpec'",
        "parsed_schedule": "(self) -> 'Schedule'",
        "validated": "(self) -> 'JobSpec'",
    },
    "JobStore": {
        "__init__": "(conn: 'Conn', settings: 'ClusterSettings', *, scope: 'str | None' = "
        "None) -> 'None'",
        "config": "(self) -> 'list[tuple[str, str, datetime]]'",
        "config_values": "(self) -> 'dict[str, str]'",
        "db_now": "(self, now: 'datetime | None' = None) -> 'datetime'",
        "details": "(self, name: 'str', tenant: 'str' = 'default', *, slots: 'int' = 5, "
        "runs: 'int' = 5, now: 'datetime | None' = None) -> 'dict[str, Any]'",
        "explain": "(self, name: 'str', tenant: 'str' = 'default', *, after: 'datetime | None'"
        " = None, count: 'int' = 10, now: 'datetime | None' = None) -> 'tuple[Job, list[Step]]'",
        "get": "(self, name: 'str', tenant: 'str' = 'default') -> 'Job'",
        "graph": "(self, tenant: 'str' = 'default') -> 'list[dict[str, str]]'",
        "has_upstreams": "(self, name: 'str', tenant: 'str' = 'default') -> 'bool'",
        "init": "(self, shards: 'int | None' = None) -> 'InitResult'",
        "jobs": "(self, tenant: 'str | None' = None, labels: 'Mapping[str, str] | None' ="
        " None) -> 'list[Job]'",
        "open": "(cls, settings: 'ClusterSettings', application_name: 'str' = "
        "'pulse-admin') -> 'AsyncIterator[JobStore]'",
        "pause": "(self, name: 'str', tenant: 'str' = 'default', *, note: 'str | None' = "
        "None, now: 'datetime | None' = None) -> 'Job'",
        "prune": "(self, *, dry_run: 'bool' = False, now: 'datetime | None' = None) -> "
        "'PruneResult'",
        "remove": (
            "(self, name: 'str', tenant: 'str' = 'default', *, cascade: 'bool' = False) "
            "-> 'list[str]'"
        ),
        "resume": "(self, name: 'str', tenant: 'str' = 'default', *, now: 'datetime | None'"
        " = None) -> 'Job'",
        "run": "(self, name: 'str', tenant: 'str' = 'default', *, slot: 'datetime | "
        "None' = None) -> 'Run'",
        "runs": "(self, job: 'str | None' = None, tenant: 'str | None' = None, status: "
        "'str | None' = None, limit: 'int' = 50) -> 'list[Run]'",
        "set_config": "(self, key: 'str', value: 'str') -> 'str'",
        "shard_count": "(self) -> 'int'",
        "transaction": "(self) -> 'AsyncIterator[None]'",
        "trigger": "(self, name: 'str', tenant: 'str' = 'default', *, now: 'datetime | None'"
        " = None) -> 'Job'",
    },
    "JobStore.definitions": {
        "add": "(self, spec: 'JobSpec', *, now: 'datetime | None' = None) -> 'Job'",
        "apply": "(self, specs: 'Sequence[JobSpec]', *, prune: 'bool' = False, now: 'datetime | "
        "None' = None, expect: 'Mapping[tuple[str, str], int] | None' = None) -> "
        "'ApplyResult'",
        "sync": "(self, specs: 'Sequence[JobSpec]', *, now: 'datetime | None' = None) -> "
        "'SyncResult'",
    },
    "JobStore.inputs": {
        "trigger": "(self, name: 'str', tenant: 'str' = 'default', *, payload: 'str | Mapping[str, "
        "Any] | None' = None, merge_payload: 'str | Mapping[str, Any] | None' = None, "
        "slot: 'datetime | None' = None, now: 'datetime | None' = None) -> 'Triggered'",
    },
    "JobStore.plans": {
        "plan": "(self, specs: 'Sequence[JobSpec]', *, prune: 'bool' = False, now: 'datetime | "
        "None' = None, slots: 'int' = 5) -> 'Plan'",
    },
    "JobStore.revisions": {
        "act_as": "(self, who: 'str', how: 'str') -> 'None'",
        "history": "(self, name: 'str', tenant: 'str', *, before: 'int | None' = None, "
        "limit: 'int' = 100) -> 'list[Revision]'",
        "restore": "(self, spec: 'JobSpec', to: 'int', *, now: 'datetime | None' = None) -> "
        "'Rollback'",
        "rollback": "(self, name: 'str', tenant: 'str', to: 'int', *, now: 'datetime | None' "
        "= None) -> 'Rollback'",
        "spec_at": "(self, name: 'str', tenant: 'str', to: 'int') -> 'JobSpec'",
    },
    "JobStore.runcontrol": {
        "backfill": "(self, name: 'str', tenant: 'str' = 'default', *, start: 'datetime', end: "
        "'datetime', only_missing: 'bool' = False, max_parallel: 'int' = 1, dry_run: "
        "'bool' = False, now: 'datetime | None' = None) -> 'BackfillPlan'",
        "backfills": "(self, tenant: 'str | None' = None, limit: 'int | None' = None) -> "
        "'list[Backfill]'",
        "cancel": "(self, name: 'str', tenant: 'str' = 'default', *, by: 'str', slot: 'datetime | "
        "None' = None, every: 'bool' = False) -> 'list[CancelRequest]'",
        "cancel_backfill": "(self, backfill_id: 'int') -> 'Backfill'",
    },
    "JobStore.watch": {
        "adopt": "(self, name: 'str', tenant: 'str' = 'default', *, at: 'datetime', "
        "handler: 'str | None' = None, now: 'datetime | None' = None) -> 'Job'",
        "double_runs": "(self, name: 'str', tenant: 'str' = 'default') -> 'list[dict[str, Any]]'",
        "ping": "(self, token: 'str', kind: 'str', body: 'bytes' = b'', *, now: 'datetime"
        " | None' = None) -> 'Ping | None'",
        "token": "(self, name: 'str', tenant: 'str' = 'default', *, rotate: 'bool' = "
        "False) -> 'str'",
    },
    "MembershipError": {
        "bases": "PulseError, Exception, BaseException",
    },
    "Node": {
        "__aenter__": "(self) -> 'HostedNode'",
        "__aexit__": "(self, exc_type: 'type[BaseException] | None', exc: 'BaseException | "
        "None', tb: 'TracebackType | None') -> 'None'",
        "__init__": "(settings: 'NodeSettings | None' = None, *, cluster: 'ClusterSettings | "
        "None' = None, sync_jobs: 'Sequence[Registry]' = ()) -> 'None'",
        "start": "(self) -> 'None'",
        "status": "(self) -> 'NodeStatus'",
        "stop": "(self) -> 'int'",
    },
    "NodeSettings": {
        "__init__": "(node_id: 'str' = <factory>, zone: 'str' = 'default', concurrency: 'int'"
        " = 32, heartbeat_interval_s: 'float' = 1.0, heartbeat_ttl_s: 'float' = "
        "5.0, poll_interval_s: 'float' = 1.0, session_timeout_s: 'float' = 10.0, "
        "lease_s: 'float' = 30.0, renew_interval_s: 'float' = 5.0, "
        "drain_timeout_s: 'float' = 30.0, statement_timeout_s: 'float' = 5.0, "
        "redis_timeout_s: 'float' = 2.0, prune_interval_s: 'float' = 30.0, "
        "shards: 'int | None' = None, metrics_port: 'int | None' = None, "
        "fairness: 'bool' = True, celery_broker: 'str | None' = None, "
        "handler_role: 'str | None' = None, otel: 'bool' = False, freeze_limit_s:"
        " 'float' = 3.0, metrics_bind: 'str' = '127.0.0.1') -> None",
        "validate": "(self) -> 'NodeSettings'",
    },
    "NodeStatus": {
        "__init__": "(node_id: 'str', running: 'bool', members: 'tuple[str, ...]', "
        "held_shards: 'tuple[int, ...]', runs_in_flight: 'int') -> None",
    },
    "NotFound": {
        "bases": "PulseError, LookupError, Exception, BaseException",
    },
    "PulseError": {
        "bases": "Exception, BaseException",
    },
    "Registry": {
        "__init__": "(tenant: 'str' = 'default') -> 'None'",
        "add": "(self, fn: 'Callable[..., Any]', schedule: 'str | Sequence[str | "
        "Mapping[str, Any]]', *, name: 'str | None' = None, **options: 'Any') -> "
        "'JobSpec'",
        "cron": "(self, expr: 'str | Sequence[str | Mapping[str, Any]]', *, name: 'str | "
        "None' = None, **options: 'Any') -> 'Callable[[F], F]'",
        "every": "(self, interval: 'str | float', *, name: 'str | None' = None, **options:"
        " 'Any') -> 'Callable[[F], F]'",
        "handler": "(self, fn: 'F | None' = None) -> 'F | Callable[[F], F]'",
        "handler_refs": "(self) -> 'list[str]'",
        "mappings": "(self) -> 'list[dict[str, Any]]'",
        "specs": "(self) -> 'list[JobSpec]'",
    },
    "Run": {
        "__init__": "(id: 'int | None', job_id: 'UUID', tenant: 'str', job_name: 'str', "
        "scheduled_for: 'datetime', attempt: 'int', node_id: 'str | None', zone: "
        "'str | None', status: 'str', started_at: 'datetime | None', finished_at:"
        " 'datetime | None', duration_s: 'float | None', last_error: 'str | "
        "None', output: 'dict[str, Any] | None' = None, origin: 'str' = "
        "'schedule', revision: 'int | None' = None) -> None",
        "from_row": "(cls, row: 'dict[str, Any]') -> 'Run'",
        "output_json": "(self) -> 'dict[str, Any]'",
        "to_json": "(self) -> 'dict[str, Any]'",
    },
    "RunContext": {
        "__init__": "(job_id: 'UUID', job_name: 'str', tenant_id: 'str', payload: 'dict[str, "
        "Any]', scheduled_for: 'datetime', attempt: 'int', timeout_s: 'float', "
        "node_id: 'str', zone: 'str', output_limit: 'int' = 16384, fencing_token:"
        " 'int' = 0, cancel_grace_s: 'float' = 10.0, effects: 'Effects | None' = "
        "None, previous_slot: 'datetime | None' = None, last_success_slot: "
        "'datetime | None' = None, state: 'dict[str, Any]' = <factory>, "
        "traceparent: 'str | None' = None, schedule_entry: 'int | None' = None) "
        "-> None",
        "log": "(self, message: 'str') -> 'None'",
        "metric": "(self, name: 'str', value: 'float') -> 'None'",
        "raise_if_cancelled": "(self) -> 'None'",
        "set_state": "(self, state: 'dict[str, Any]') -> 'None'",
        "transaction": "(self) -> 'RunTransaction'",
    },
    "Skip": {
        "bases": "Exception, BaseException",
    },
    "StoreError": {
        "bases": "PulseError, Exception, BaseException",
    },
    "SyncResult": {
        "__init__": "(created: 'list[str]' = <factory>, differing: 'list[str]' = <factory>, "
        "unchanged: 'list[str]' = <factory>) -> None",
    },
}
