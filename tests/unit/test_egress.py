"""The egress guard's address policy (cluster/config/egress.py): every range refused by
default and the rule that names it, IPv4 addresses carried in IPv6 ones, host spellings the
C resolver reads as addresses, and how ``egress.allow`` opens networks (metadata only by
name)."""

from __future__ import annotations

import ipaddress

import pytest

from cluster.config.egress import (
    EgressPolicy,
    canonical_allow,
    canonical_body,
    classify,
    literal_address,
    parse_nat64,
    parse_networks,
    refused_message,
)
from cluster.config.keys import KEYS, canonical, defaults
from cluster.errors import InvalidInput

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"),
    ("169.254.0.1", "link-local"),
    ("fe80::1", "link-local"),
    ("febf:ffff::1", "link-local"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("fc00::1", "unique-local"),
    ("fd12:3456::1", "unique-local"),
    ("100.64.0.1", "cgnat"),
    ("100.127.255.255", "cgnat"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("192.0.2.1", "reserved"),  # documentation
    ("198.18.0.1", "reserved"),  # benchmarking
    ("192.0.0.8", "reserved"),
    ("2001:db8::1", "reserved"),
    ("fec0::1", "reserved"),
    # IPv4 carried in IPv6: mapped, compatible, NAT64, 6to4, Teredo
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:7f00:1", "loopback"),
    ("::ffff:169.254.169.254", "metadata"),
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:100.64.0.1", "cgnat"),
    ("::127.0.0.1", "loopback"),
    ("64:ff9b::127.0.0.1", "loopback"),
    ("64:ff9b::a9fe:a9fe", "metadata"),
    ("2002:7f00:1::1", "loopback"),
    ("2002:c0a8:101::1", "private"),
    ("::ffff:0:7f00:1", "loopback"),  # SIIT's IPv4-translated form
    ("::ffff:0:a9fe:a9fe", "metadata"),
    ("64:ff9b:1:7f00:0:100::", "loopback"),  # local-use NAT64, RFC 6052's /48 layout
    ("64:ff9b:1:808:0:808::", "reserved"),  # carries 8.8.8.8, but only the operator's opens it
    ("100::1", "reserved"),  # discard-only
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "100.128.0.1", "169.255.0.1",
          "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"]  # fmt: skip


@pytest.mark.parametrize(("address", "rule"), REFUSED)
def test_every_range_refused_by_default_is_named(address: str, rule: str) -> None:
    ip = ipaddress.ip_address(address)
    assert classify(ip) == rule
    assert EgressPolicy().refusal(ip) == rule


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert classify(ipaddress.ip_address(address)) is None
    assert EgressPolicy().refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),  # decimal
        ("0x7f000001", "127.0.0.1"),  # hex
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),  # octal
        ("0177.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0xA9FEA9FE", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("[::1]", "::1"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
        ("[0:0:0:0:0:ffff:7f00:1]", "::ffff:127.0.0.1"),
        ("[fe80::1%eth0]", "fe80::1"),
    ],
)
def test_host_spellings_are_read_as_the_address_they_mean(host: str, address: str) -> None:
    found = literal_address(host)
    assert found is not None and found == ipaddress.ip_address(address)
    assert classify(found) is not None


@pytest.mark.parametrize("host", ["localhost", "example.com", "deadbeef", "1e100.net", "a.0x1"])
def test_names_are_not_addresses(host: str) -> None:
    assert literal_address(host) is None


def test_egress_allow_opens_its_networks_and_only_them() -> None:
    policy = EgressPolicy(parse_networks("10.1.0.0/16, 127.0.0.0/8"))
    assert policy.refusal(ipaddress.ip_address("10.1.2.3")) is None
    assert policy.refusal(ipaddress.ip_address("10.2.0.1")) == "private"
    assert policy.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert policy.refusal(ipaddress.ip_address("::ffff:127.0.0.1")) is None  # the same host
    assert policy.refusal(ipaddress.ip_address("::1")) == "loopback"  # IPv6 not opened


def test_the_operators_nat64_prefix_is_judged_by_the_address_it_carries() -> None:
    policy = EgressPolicy(nat64=parse_nat64("64:ff9b:1:2::/96, 2001:db8:64::/64"))
    assert policy.refusal(ipaddress.ip_address("64:ff9b:1:2::8.8.8.8")) is None
    assert policy.refusal(ipaddress.ip_address("64:ff9b:1:2::127.0.0.1")) == "loopback"
    assert policy.refusal(ipaddress.ip_address("2001:db8:64:0:a9:fea9:fe00:0")) == "metadata"
    assert policy.refusal(ipaddress.ip_address("64:ff9b:1:3::8.8.8.8")) is not None
    assert EgressPolicy.from_config({"egress.nat64": "64:ff9b:1:2::/96"}).nat64 == policy.nat64[:1]
    for bad in ("10.0.0.0/8", "64:ff9b:1::/50", "nonsense"):
        with pytest.raises(InvalidInput) as caught:
            parse_nat64(bad)
        assert caught.value.field == "egress.nat64"


def test_an_ipv6_network_never_opens_the_ipv4_address_it_carries() -> None:
    policy = EgressPolicy(parse_networks("::/0"))
    assert policy.refusal(ipaddress.ip_address("::ffff:127.0.0.1")) == "loopback"
    assert policy.refusal(ipaddress.ip_address("::1")) is None


def test_metadata_is_opened_only_by_naming_it() -> None:
    wide = EgressPolicy(parse_networks("0.0.0.0/0,::/0,169.254.0.0/16"))
    for address in ("169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254"):
        assert wide.refusal(ipaddress.ip_address(address)) == "metadata"
    assert wide.refusal(ipaddress.ip_address("169.254.1.1")) is None
    named = EgressPolicy(parse_networks("169.254.169.254"))
    assert named.refusal(ipaddress.ip_address("169.254.169.254")) is None


def test_the_config_keys_are_checked_and_stored_canonically() -> None:
    assert canonical("egress.allow", " 10.1.2.3/16 ,127.0.0.1, ::1 ,10.1.0.0/16") == (
        "10.1.0.0/16,127.0.0.1/32,::1/128"
    )
    assert canonical_allow("") == ""
    assert canonical("api.http_body", " Keep ") == "keep"
    assert defaults()["egress.allow"] == "" and defaults()["api.http_body"] == "drop"
    assert {"egress.allow", "api.http_body", "celery.brokers"} <= set(KEYS)
    for bad in ("10.0.0.0/33", "localhost", "10.0.0.0/8;rm"):
        with pytest.raises(InvalidInput) as caught:
            canonical("egress.allow", bad)
        assert caught.value.field == "egress.allow"
    with pytest.raises(InvalidInput) as caught:
        canonical_body("sometimes")
    assert caught.value.field == "api.http_body"


def test_a_bad_stored_value_opens_nothing() -> None:
    assert EgressPolicy.from_config({"egress.allow": "not a network"}).allowed == ()


def test_the_refusal_names_the_host_and_the_rule() -> None:
    ip = ipaddress.ip_address("127.0.0.1")
    assert refused_message("localhost", ip, "loopback") == (
        "egress to localhost (127.0.0.1) refused: loopback address "
        "(pulse config set egress.allow ...)"
    )
    assert refused_message("127.0.0.1", ip, "loopback").startswith("egress to 127.0.0.1 refused")
