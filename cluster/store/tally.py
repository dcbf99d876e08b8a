"""How many transactions this process's connections sent, by connection and statement.

What a node costs Postgres while it has nothing to do is a design target (the maintenance
beat, docs/design/beat.md), and the server's own counters cannot show it: the
``xact_commit`` of ``pg_stat_database`` moves with what other databases on the server do,
and ``pg_stat_statements`` is not always loaded. So every adapter that sends a statement
on a node's connection counts it here, once per transaction (a statement in autocommit,
or a whole transaction block), under the connection's role (``lock``, ``upkeep``,
``write``, ``listen``, ``watch``) and the statement's name. A node exports the tally as
the ``pulse_db_transactions_total`` metric; tests and ``bench.idle`` read it.
"""

from __future__ import annotations

from collections import Counter

TALLY: Counter[tuple[str, str]] = Counter()


def count(connection: str, statement: str) -> None:
    """One transaction sent on ``connection`` (its role), by ``statement``'s name."""
    TALLY[(connection, statement)] += 1


def role(application_name: str) -> str:
    """The role of a connection from its ``application_name`` (``<node id>/upkeep``)."""
    return application_name.rsplit("/", 1)[1] if "/" in application_name else "lock"
