"""Store URLs: host lists, Sentinel URLs, masking, and the forms refused as bad input."""

from __future__ import annotations

import pytest

from cluster.errors import InvalidInput
from cluster.settings import ClusterSettings
from cluster.urls import (
    SentinelTarget,
    check_database_url,
    check_redis_url,
    host_list,
    is_multi_host,
    mask_url,
    sentinel_target,
)

MULTI = "postgresql://pulse:s3cret@h1:5432,h2:5433/db?target_session_attrs=read-write"


def test_mask_url_masks_the_password_of_a_host_list() -> None:
    assert mask_url(MULTI) == (
        "postgresql://pulse:***@h1:5432,h2:5433/db?target_session_attrs=read-write"
    )


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        (
            "postgresql://u@h/db?password=pw&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        (
            "redis+sentinel://:pw@a:26379,b:26379/main/1",
            "redis+sentinel://:***@a:26379,b:26379/main/1",
        ),
        (
            "redis+sentinel://a/main?sentinel_password=x",
            "redis+sentinel://a/main?sentinel_password=***",
        ),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("amqp://guest:guest@[::1]:5672//", "amqp://guest:***@[::1]:5672//"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_host_list_and_multi_host() -> None:
    assert host_list(MULTI) == [("h1", 5432), ("h2", 5433)]
    assert host_list("postgresql://[::1]:5432,h3/db") == [("::1", 5432), ("h3", None)]
    assert is_multi_host(MULTI)
    assert is_multi_host("postgresql:///db?host=a,b")
    assert not is_multi_host("postgresql://u@h:5432/db")


def test_sentinel_target() -> None:
    assert sentinel_target("redis+sentinel://u:pw@a:1,b/main/3?sentinel_password=s") == (
        SentinelTarget((("a", 1), ("b", 26379)), "main", 3, "u", "pw", "s")
    )
    assert sentinel_target("redis+sentinel://a:1/main").db == 0


CHECKS = {"database_url": check_database_url, "redis_url": check_redis_url}


@pytest.mark.parametrize(
    ("field", "url"),
    [
        ("database_url", MULTI),
        ("database_url", "postgres://h/db"),
        # a socket directory (embedded)
        ("database_url", "postgresql://postgres:@/postgres?host=/tmp/pg"),
        ("redis_url", "redis://127.0.0.1:6379/0"),
        ("redis_url", "rediss://h:6380/1"),
        ("redis_url", "unix:///tmp/redis.sock?db=0"),
        ("redis_url", "redis+sentinel://a:26379,b:26380/main"),
        ("redis_url", "redis+sentinel://:pw@a/main/2"),
    ],
)
def test_accepted_urls(field: str, url: str) -> None:
    CHECKS[field](url)


@pytest.mark.parametrize(
    ("field", "url"),
    [
        ("database_url", "mysql://h/db"),
        ("database_url", "h1:5432/db"),
        ("database_url", "postgresql:///db"),
        ("database_url", "postgresql://u:pw@/db"),
        ("database_url", "postgresql://h1,,h2/db"),
        ("database_url", "postgresql://h1:port/db"),
        ("redis_url", "http://x"),
        ("redis_url", "memcached://h:11211"),
        ("redis_url", "redis://"),
        ("redis_url", "redis://a:1,b:2/0"),
        ("redis_url", "redis+sentinel:///main"),
        ("redis_url", "redis+sentinel://a,,b/main"),
        ("redis_url", "redis+sentinel://a:26379"),
        ("redis_url", "redis+sentinel://a/main/x"),
        ("redis_url", "redis+sentinel://a/main/1/2"),
    ],
)
def test_refused_urls(field: str, url: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        CHECKS[field](url)
    assert raised.value.field == field
    assert "pw" not in str(raised.value)


def test_settings_validate_both_urls() -> None:
    ClusterSettings(database_url=MULTI, redis_url="redis+sentinel://a,b/main").validate()
    with pytest.raises(InvalidInput):
        ClusterSettings(database_url="postgresql://,/db").validate()
