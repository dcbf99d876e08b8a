"""A schema's catalog read back from Postgres, to compare the schemas two ways of making
one left: relations, columns, constraints, indexes, functions, triggers and views, as
sorted lines, one list per kind. ``schema.sql`` against the migrations
(``tests/integration/test_schema.py``), an upgraded schema against a fresh one
(``tests/integration/test_upgrade_paths.py``)."""

from __future__ import annotations

import psycopg
from psycopg import sql

Catalog = dict[str, list[str]]

RELATIONS = """
SELECT c.relname || ' ' || c.relkind::text
       || coalesce(' ' || array_to_string(c.reloptions, ','), '')
FROM pg_class c
WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
"""

# Positions are counted, not taken from attnum, which keeps the gap of a dropped column.
COLUMNS = """
SELECT c.relname || ' ' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) || ' '
       || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
       || CASE a.attidentity::text
          WHEN 'a' THEN ' IDENTITY ALWAYS' WHEN 'd' THEN ' IDENTITY' ELSE '' END
       || CASE WHEN a.attgenerated = 's' THEN ' GENERATED ' ELSE ' DEFAULT ' END
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND a.attnum > 0 AND NOT a.attisdropped
"""

# A check a migration added NOT VALID (to spare a scan under lock) holds for every row all
# the same; schema.sql declares it plainly.
CONSTRAINTS = """
SELECT c.relname || ' ' || con.conname || ' '
       || regexp_replace(pg_get_constraintdef(con.oid), ' NOT VALID$', '')
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
WHERE con.connamespace = %(s)s::regnamespace
"""

INDEXES = """
SELECT pg_get_indexdef(i.indexrelid)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relnamespace = %(s)s::regnamespace
"""

# Definitions span lines: each is (a short name, its text); every line, stripped, is
# prefixed with the name, so a diff says whose line it is.
FUNCTIONS = """
SELECT p.proname || '/' || p.pronargs, pg_get_functiondef(p.oid)
FROM pg_proc p
WHERE p.pronamespace = %(s)s::regnamespace
"""

TRIGGERS = """
SELECT c.relname || '.' || t.tgname, pg_get_triggerdef(t.oid, true)
FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = %(s)s::regnamespace AND NOT t.tgisinternal
"""

VIEWS = """
SELECT c.relname, pg_get_viewdef(c.oid, true)
FROM pg_class c
WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('v', 'm')
"""

LINES = {
    "relations": RELATIONS,
    "columns": COLUMNS,
    "constraints": CONSTRAINTS,
    "indexes": INDEXES,
}
DEFINITIONS = {"functions": FUNCTIONS, "triggers": TRIGGERS, "views": VIEWS}


def catalog(url: str, schema: str) -> Catalog:
    """The catalog of ``schema`` as sorted lines, one list per kind of object."""
    found: Catalog = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        for kind, query in LINES.items():
            found[kind] = sorted(row[0] for row in conn.execute(query, {"s": schema}))
        for kind, query in DEFINITIONS.items():
            found[kind] = [
                f"{name}: {line.strip()}"
                for name, text in sorted(conn.execute(query, {"s": schema}).fetchall())
                for line in text.splitlines()
                if line.strip()
            ]
    return found
