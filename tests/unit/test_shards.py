"""Job -> shard hashing: stable across processes and releases, in range, and fair."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ring import MAX_SHARD_COUNT, shard_for, validate_shard_count

FAST = settings(max_examples=200, deadline=None, database=None)
shard_counts = st.integers(min_value=1, max_value=MAX_SHARD_COUNT)
job_ids = st.uuids() | st.text(max_size=64)
canonical_uuid = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)

# Golden values: if any of these change, every job in a running cluster moves
# to another shard. Do not "fix" them; find out what changed the hash.
GOLDEN = [
    (uuid.UUID("00000000-0000-0000-0000-000000000000"), 256, 14),
    (uuid.UUID("12345678-1234-5678-1234-567812345678"), 256, 207),
    ("job-1", 256, 107),
    ("job-1", 65536, 46443),
    ("job-1", 7, 2),
    ("nightly-report", 256, 125),
    ("nightly-report", 65536, 40573),
    ("", 256, 180),
    ("ünïcødé", 256, 57),
]


@pytest.mark.parametrize(("job_id", "shard_count", "expected"), GOLDEN)
def test_golden_values(job_id: uuid.UUID | str, shard_count: int, expected: int) -> None:
    assert shard_for(job_id, shard_count) == expected


def _reference(data: bytes, shard_count: int) -> int:
    digest = hashlib.blake2b(data, digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


@given(job_id=st.uuids(), shard_count=shard_counts)
@FAST
def test_uuid_hashes_its_16_bytes(job_id: uuid.UUID, shard_count: int) -> None:
    assert shard_for(job_id, shard_count) == _reference(job_id.bytes, shard_count)


@given(job_id=st.uuids(), shard_count=shard_counts)
@FAST
def test_canonical_uuid_text_hashes_like_the_uuid(job_id: uuid.UUID, shard_count: int) -> None:
    expected = shard_for(job_id, shard_count)
    assert shard_for(str(job_id), shard_count) == expected
    assert shard_for(str(job_id).upper(), shard_count) == expected


@given(text=st.text(max_size=64), shard_count=shard_counts)
@FAST
def test_other_text_hashes_its_utf8(text: str, shard_count: int) -> None:
    assume(not canonical_uuid.fullmatch(text))
    assert shard_for(text, shard_count) == _reference(text.encode("utf-8"), shard_count)


@pytest.mark.parametrize(
    "text",
    [
        "{12345678-1234-5678-1234-567812345678}",
        "urn:uuid:12345678-1234-5678-1234-567812345678",
        "12345678123456781234567812345678",
    ],
)
def test_non_canonical_uuid_forms_hash_as_text(text: str) -> None:
    # uuid.UUID() accepts these, but how lenient it is is up to each Python
    # release; only the canonical form may be read as a UUID.
    assert shard_for(text, 256) == _reference(text.encode("utf-8"), 256)


@given(job_id=job_ids, shard_count=shard_counts)
@FAST
def test_in_range(job_id: uuid.UUID | str, shard_count: int) -> None:
    assert 0 <= shard_for(job_id, shard_count) < shard_count


@given(job_id=job_ids)
@FAST
def test_one_shard_means_shard_zero(job_id: uuid.UUID | str) -> None:
    assert shard_for(job_id, 1) == 0


def test_spreads_evenly() -> None:
    ids = [uuid.uuid5(uuid.NAMESPACE_OID, str(i)) for i in range(16_000)]
    counts = Counter(shard_for(job_id, 16) for job_id in ids)
    assert set(counts) == set(range(16))
    assert all(900 <= count <= 1100 for count in counts.values()), counts


@pytest.mark.parametrize("bad", [0, -1, MAX_SHARD_COUNT + 1])
def test_rejects_out_of_range_counts(bad: int) -> None:
    with pytest.raises(ValueError, match="shard count"):
        validate_shard_count(bad)
    with pytest.raises(ValueError, match="shard count"):
        shard_for("job-1", bad)


@pytest.mark.parametrize("bad", [True, 2.0, "256", None])
def test_rejects_non_int_counts(bad: object) -> None:
    with pytest.raises(ValueError, match="shard count"):
        validate_shard_count(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", [1, 256, MAX_SHARD_COUNT])
def test_accepts_counts_in_range(good: int) -> None:
    assert validate_shard_count(good) == good


def test_rejects_other_id_types() -> None:
    with pytest.raises(TypeError, match="job id"):
        shard_for(12345, 256)  # type: ignore[arg-type]
