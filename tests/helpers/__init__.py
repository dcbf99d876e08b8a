"""What the tests share, and nothing else: no test lives here.

``waiting`` (``until``: poll with a deadline), ``databases`` (the session's database, each
test's schema and Redis prefix), ``cli`` (the `pulse` command, in-process or as a process),
``nodes``, ``fleet``, ``failover``, ``chaosrun`` and ``web`` (real processes and what they
leave behind), ``receiver`` (an HTTP server that records requests), ``catalogs`` (a schema's
catalog), ``releases`` (the previous release, from git), and the common ground of
some test groups: ``sessions``, ``flights``, ``history``, ``plans``, ``outbox``, ``claimed``.
Test modules import from here, never from each other (``tests/test_suite.py``).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
