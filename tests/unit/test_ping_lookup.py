"""An unknown ping token and a malformed one cost the same work
(cluster/store/housekeeping/watches.py): one hash, one lookup of 32 bytes, nothing else, so neither
answer nor timing tells a well-formed guess from garbage. On a fake fetch that records the
statements."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cluster.store.housekeeping.watches import new_token, record_ping, token_hash


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls.append((name, params))
        return []  # no job has this hash


async def test_unknown_and_malformed_tokens_take_the_same_way() -> None:
    seen = []
    for token in (new_token(), "A" * 43, "", "%00/../x", "\udcff" * 3, "x" * 5000):
        fetch = Recorder()
        now = datetime(2026, 1, 1, tzinfo=UTC)
        assert await record_ping(fetch, token, "success", body=b"b", shards=16, now=now) is None
        seen.append([(name, sorted(p), len(p["hash"])) for name, p in fetch.calls])
    assert all(calls == [("watch_by_hash", ["hash"], 32)] for calls in seen)


def test_a_token_has_256_random_bits_and_only_its_hash_is_kept() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100 and all(len(t) == 43 for t in tokens)
    token = next(iter(tokens))
    assert len(token_hash(token)) == 32 and token.encode() not in token_hash(token)
