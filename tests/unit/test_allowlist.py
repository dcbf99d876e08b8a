"""The handler allow-list's matching rules and the failed-authentication limiter."""

from __future__ import annotations

import pytest

from cluster.config.allowlist import AllowList, parse
from cluster.errors import InvalidInput
from cluster.web.limits import FailureLimiter


def test_patterns_match_whole_handler_references() -> None:
    allowed = AllowList(parse("billing.*:*,reports.jobs:daily"))
    assert allowed.allows("billing.invoices:run")
    assert allowed.allows("reports.jobs:daily")
    assert not allowed.allows("reports.jobs:weekly")
    assert not allowed.allows("billingx:run")
    assert not AllowList().allows("billing.invoices:run"), "empty allows nothing"


def test_only_a_pattern_of_their_own_scheme_allows_shell_and_http_handlers() -> None:
    assert not AllowList(parse("*:*")).allows("shell:rm -rf /")
    assert not AllowList(parse("*:*")).allows("http://example.test/hook")
    assert AllowList(parse("shell:backup *")).allows("shell:backup --all")
    assert not AllowList(parse("shell:backup *")).allows("shell:rm -rf /")
    assert not AllowList(parse("shell:backup *")).allows("backup.x:y")


def test_bad_patterns_name_the_key() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse("billing")
    assert caught.value.field == "api.handlers"
    assert parse(" a:b , ,c:* ") == ("a:b", "c:*")


def test_the_limiter_refuses_an_address_past_its_failures_until_they_age_out() -> None:
    limiter = FailureLimiter(max_failures=2, window_s=10)
    limiter.failed("1.2.3.4", now=0)
    assert limiter.retry_after_s("1.2.3.4", now=1) is None
    limiter.failed("1.2.3.4", now=1)
    assert limiter.retry_after_s("1.2.3.4", now=2) == 8
    assert limiter.retry_after_s("5.6.7.8", now=2) is None, "per address"
    assert limiter.retry_after_s("1.2.3.4", now=10.5) is None
