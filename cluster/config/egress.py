"""Where a node's outbound requests may go (the egress guard's policy, pure) and what it
keeps of their answers: the ``egress.allow`` and ``api.http_body`` config keys.

Every ``http:`` handler and alert webhook connects only to an address this policy allows
(``cluster.outbound`` resolves the host once and pins the connection to the checked
address). Loopback, link-local, private (RFC 1918), ULA, CGNAT, unspecified, multicast and
reserved addresses are refused unless a network of ``egress.allow`` (CIDR list, empty by
default) contains them; a cloud metadata address only by an entry naming exactly it, so
``0.0.0.0/0`` or ``169.254.0.0/16`` never opens it. An IPv6 address that carries an IPv4
one (mapped, translated ``::ffff:0:a.b.c.d``, compatible, NAT64 ``64:ff9b::/96`` and
``64:ff9b:1::/48``, 6to4, Teredo, and the operator's own NAT64 prefix, ``egress.nat64``) is
judged by both. Why: docs/security.md.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from cluster.errors import InvalidInput

EGRESS_ALLOW = "egress.allow"
EGRESS_NAT64 = "egress.nat64"
API_HTTP_BODY = "api.http_body"
BODY_CHOICES = ("keep", "drop")
DEFAULTS = {EGRESS_ALLOW: "", EGRESS_NAT64: "", API_HTTP_BODY: "drop"}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
# First match names the rule; anything else not globally routable is "reserved".
_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loopback", ("127.0.0.0/8", "::1/128")),
    ("unspecified", ("0.0.0.0/8", "::/128")),
    ("link-local", ("169.254.0.0/16", "fe80::/10")),
    ("private", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")),
    ("unique-local", ("fc00::/7",)),
    ("cgnat", ("100.64.0.0/10",)),
    ("multicast", ("224.0.0.0/4", "ff00::/8")),
    # 64:ff9b:1::/48 is NAT64 for local use: reached only through the operator's prefix.
    ("reserved", ("240.0.0.0/4", "192.0.0.0/24", "fec0::/10", "64:ff9b:1::/48", "100::/64")),
)
RULES = tuple((name, tuple(ipaddress.ip_network(n) for n in nets)) for name, nets in _RULES)
# Where RFC 6052 puts the IPv4 address in an IPv6 one, by prefix length: (start, end) byte
# ranges, skipping byte 8 (the "u" octet).
_RFC6052 = {
    32: ((4, 8),),
    40: ((5, 8), (9, 10)),
    48: ((6, 8), (9, 11)),
    56: ((7, 8), (9, 12)),
    64: ((9, 13),),
    96: ((12, 16),),
}
# Well-known translation prefixes; the SIIT form ::ffff:0:a.b.c.d is RFC 2765's.
_TRANSLATED = tuple(
    ipaddress.IPv6Network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::ffff:0:0:0/96")
)


def _carried(address: ipaddress.IPv6Address, prefix: ipaddress.IPv6Network) -> Address:
    packed = address.packed
    return ipaddress.IPv4Address(b"".join(packed[a:b] for a, b in _RFC6052[prefix.prefixlen]))


def embedded(address: Address, nat64: tuple[ipaddress.IPv6Network, ...] = ()) -> list[Address]:
    """``address`` and every IPv4 address an IPv6 one carries (``nat64``: the operator's
    own translation prefixes, ``egress.nat64``)."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        packed = int(address)
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        elif packed >> 32 == 0 and packed > 1:  # IPv4-compatible ::a.b.c.d
            found.append(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
        # the operator's prefix, where it lies inside a well-known one, says the layout
        own = [prefix for prefix in nat64 if address in prefix]
        for prefix in own or [prefix for prefix in _TRANSLATED if address in prefix]:
            found.append(_carried(address, prefix))
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found.extend(address.teredo)
    return list(dict.fromkeys(found))


def _rule(one: Address, carrier: bool) -> str | None:
    if one in METADATA:
        return "metadata"
    for name, networks in RULES:
        if any(one.version == n.version and one in n for n in networks):
            return name
    # An IPv6 address carrying an IPv4 one is judged by that one, not by its own range.
    return None if one.is_global or carrier else "reserved"


def rules_of(
    address: Address, nat64: tuple[ipaddress.IPv6Network, ...] = ()
) -> list[tuple[Address, str]]:
    """Each address ``address`` reaches (itself, the IPv4 one it carries) with the rule
    that refuses it by default; the carried IPv4 first. An address of the operator's
    NAT64 prefix is judged by the IPv4 address it carries alone."""
    carried = embedded(address, nat64)
    inner = [(one, _rule(one, False)) for one in carried[1:]]
    own = any(address in prefix for prefix in nat64)
    outer = (address, None if own else _rule(address, len(carried) > 1))
    return [(one, rule) for one, rule in (*inner, outer) if rule is not None]


def classify(address: Address) -> str | None:
    """The rule that refuses ``address`` by default (``metadata``, ``loopback``, ...), or
    None for a public address."""
    found = rules_of(address)
    return found[0][1] if found else None


def literal_address(host: str) -> Address | None:
    """The address a host written as an IP literal means, in any spelling the C resolver
    takes (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``[::ffff:127.0.0.1]``); None for a
    name."""
    bare = host.strip().removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        pass
    if bare and all(ch in "0123456789abcdefxABCDEFX." for ch in bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def parse_networks(text: str) -> tuple[Network, ...]:
    """The networks of an ``egress.allow`` value; ``InvalidInput`` naming the key."""
    if not isinstance(text, str):
        raise InvalidInput(EGRESS_ALLOW, "must be text")
    found: list[Network] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            found.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise InvalidInput(EGRESS_ALLOW, f"{item!r} is not a CIDR network ({exc})") from exc
    return tuple(dict.fromkeys(found))


def canonical_allow(text: str) -> str:
    return ",".join(str(n) for n in parse_networks(text))


def parse_nat64(text: str) -> tuple[ipaddress.IPv6Network, ...]:
    """The operator's NAT64 prefixes (``egress.nat64``): IPv6 networks of an RFC 6052
    length (32, 40, 48, 56, 64 or 96 bits); ``InvalidInput`` naming the key."""
    try:
        found = parse_networks(text)
    except InvalidInput as exc:
        raise InvalidInput(EGRESS_NAT64, exc.problem) from exc
    for network in found:
        if not isinstance(network, ipaddress.IPv6Network) or network.prefixlen not in _RFC6052:
            raise InvalidInput(
                EGRESS_NAT64, f"{network} is not an IPv6 prefix of 32, 40, 48, 56, 64 or 96 bits"
            )
    return tuple(n for n in found if isinstance(n, ipaddress.IPv6Network))


def canonical_nat64(text: str) -> str:
    return ",".join(str(n) for n in parse_nat64(text))


def canonical_body(text: str) -> str:
    value = text.strip().lower() if isinstance(text, str) else ""
    if value not in BODY_CHOICES:
        raise InvalidInput(API_HTTP_BODY, f"must be {' or '.join(BODY_CHOICES)}")
    return value


CHECKS = {
    EGRESS_ALLOW: canonical_allow,
    EGRESS_NAT64: canonical_nat64,
    API_HTTP_BODY: canonical_body,
}


@dataclass(frozen=True)
class EgressPolicy:
    """The networks the operator opened (``egress.allow``) and its NAT64 prefixes."""

    allowed: tuple[Network, ...] = ()
    nat64: tuple[ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_config(cls, values: dict[str, str]) -> EgressPolicy:
        """From the ``config`` table; a bad stored value opens nothing."""
        try:
            allowed = parse_networks(values.get(EGRESS_ALLOW, ""))
        except InvalidInput:
            allowed = ()
        try:
            nat64 = parse_nat64(values.get(EGRESS_NAT64, ""))
        except InvalidInput:
            nat64 = ()
        return cls(allowed, nat64)

    def _opens(self, address: Address, exact: bool) -> bool:
        for network in self.allowed:
            if network.version != address.version or address not in network:
                continue
            if not exact or network.num_addresses == 1:
                return True
        return False

    def refusal(self, address: Address) -> str | None:
        """Why ``address`` may not be reached (the rule's name), or None if it may."""
        for one, rule in rules_of(address, self.nat64):
            if not self._opens(one, exact=rule == "metadata"):
                return rule
        return None


def refused_message(host: str, address: Address, rule: str) -> str:
    """The one line a refused request fails with: the host and the rule, no secret."""
    shown = host if literal_address(host) == address else f"{host} ({address})"
    return f"egress to {shown} refused: {rule} address (pulse config set {EGRESS_ALLOW} ...)"
