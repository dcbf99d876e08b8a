"""Stable job -> shard hashing and the shard-count bounds.

Every node, every process and every release must put a job in the same shard,
or two nodes could both believe they own it. Python's built-in ``hash()`` is
salted per process (``PYTHONHASHSEED``), so the shard comes from a fixed
cryptographic digest instead: BLAKE2b with an 8-byte digest over the job id
(its 16 UUID bytes, or its UTF-8 text), read as an unsigned big-endian integer,
modulo the shard count.

Changing anything here re-shards every job in a running cluster; the golden
values in ``tests/unit/test_shards.py`` exist to catch that.
"""

from __future__ import annotations

import hashlib
import re
import uuid

MIN_SHARD_COUNT = 1
# Shards double as the second int4 of a Postgres two-int advisory lock key, so
# far more would fit; the cap only keeps a typo from creating millions of locks.
MAX_SHARD_COUNT = 65536

_DIGEST_SIZE = 8  # 64 bits: modulo bias below 2**-48 for any allowed count

# Only the canonical text form (what ``str(uuid)`` and Postgres' ``uuid::text``
# produce) counts as a UUID. ``uuid.UUID()`` itself also accepts braces, URNs,
# underscores and non-ASCII digits, and how lenient it is may change between
# Python releases, which must never move a job to another shard.
_CANONICAL_UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def validate_shard_count(n: int) -> int:
    """Return ``n`` if it is an allowed shard count, else raise ValueError."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"shard count must be an integer, got {n!r}")
    if not MIN_SHARD_COUNT <= n <= MAX_SHARD_COUNT:
        raise ValueError(
            f"shard count must be between {MIN_SHARD_COUNT} and {MAX_SHARD_COUNT}, got {n}"
        )
    return n


def shard_for(job_id: uuid.UUID | str, shard_count: int) -> int:
    """Return the shard (``0 <= shard < shard_count``) that owns ``job_id``.

    A string in canonical UUID form (any case) hashes exactly like that UUID,
    so ``shard_for(u, n) == shard_for(str(u), n)``; any other string hashes
    as its UTF-8 bytes.
    """
    validate_shard_count(shard_count)
    digest = hashlib.blake2b(_id_bytes(job_id), digest_size=_DIGEST_SIZE).digest()
    return int.from_bytes(digest, "big") % shard_count


def _id_bytes(job_id: uuid.UUID | str) -> bytes:
    if isinstance(job_id, uuid.UUID):
        return job_id.bytes
    if isinstance(job_id, str):
        if _CANONICAL_UUID.fullmatch(job_id):
            return uuid.UUID(job_id).bytes
        return job_id.encode("utf-8")
    raise TypeError(f"job id must be a UUID or a str, got {type(job_id).__name__}")
