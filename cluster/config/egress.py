"""Where a node's outbound requests may go (the egress guard's policy, pure) and what it
keeps of their answers: the ``egress.allow`` and ``api.http_body`` config keys.

Every ``http:`` handler and alert webhook connects only to an address this policy allows
(``cluster.outbound`` resolves the host once and pins the connection to the checked
address). Loopback, link-local, private (RFC 1918), ULA, CGNAT, unspecified, multicast and
reserved addresses are refused unless a network of ``egress.allow`` (CIDR list, empty by
default) contains them; a cloud metadata address only by an entry naming exactly it, so
``0.0.0.0/0`` or ``169.254.0.0/16`` never opens it. An IPv6 address that carries an IPv4
one (mapped, compatible, NAT64, 6to4, Teredo) is judged by both. Why: docs/security.md.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from cluster.errors import InvalidInput

EGRESS_ALLOW = "egress.allow"
API_HTTP_BODY = "api.http_body"
BODY_CHOICES = ("keep", "drop")
DEFAULTS = {EGRESS_ALLOW: "", API_HTTP_BODY: "drop"}

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
    ("reserved", ("240.0.0.0/4", "192.0.0.0/24", "fec0::/10")),
)
RULES = tuple((name, tuple(ipaddress.ip_network(n) for n in nets)) for name, nets in _RULES)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded(address: Address) -> list[Address]:
    """``address`` and every IPv4 address an IPv6 one carries."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        packed = int(address)
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        elif packed >> 32 == 0 and packed > 1:  # IPv4-compatible ::a.b.c.d
            found.append(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
        if address in _NAT64:
            found.append(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found.extend(address.teredo)
    return found


def _rule(one: Address, carrier: bool) -> str | None:
    if one in METADATA:
        return "metadata"
    for name, networks in RULES:
        if any(one.version == n.version and one in n for n in networks):
            return name
    # An IPv6 address carrying an IPv4 one is judged by that one, not by its own range.
    return None if one.is_global or carrier else "reserved"


def rules_of(address: Address) -> list[tuple[Address, str]]:
    """Each address ``address`` reaches (itself, the IPv4 one it carries) with the rule
    that refuses it by default; the carried IPv4 first."""
    carried = embedded(address)
    inner = [(one, _rule(one, False)) for one in carried[1:]]
    outer = (address, _rule(address, len(carried) > 1))
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


def canonical_body(text: str) -> str:
    value = text.strip().lower() if isinstance(text, str) else ""
    if value not in BODY_CHOICES:
        raise InvalidInput(API_HTTP_BODY, f"must be {' or '.join(BODY_CHOICES)}")
    return value


CHECKS = {EGRESS_ALLOW: canonical_allow, API_HTTP_BODY: canonical_body}


@dataclass(frozen=True)
class EgressPolicy:
    """The networks the operator opened (``egress.allow``)."""

    allowed: tuple[Network, ...] = ()

    @classmethod
    def from_config(cls, values: dict[str, str]) -> EgressPolicy:
        """From the ``config`` table; a bad stored value opens nothing."""
        try:
            return cls(parse_networks(values.get(EGRESS_ALLOW, "")))
        except InvalidInput:
            return cls()

    def _opens(self, address: Address, exact: bool) -> bool:
        for network in self.allowed:
            if network.version != address.version or address not in network:
                continue
            if not exact or network.num_addresses == 1:
                return True
        return False

    def refusal(self, address: Address) -> str | None:
        """Why ``address`` may not be reached (the rule's name), or None if it may."""
        for one, rule in rules_of(address):
            if not self._opens(one, exact=rule == "metadata"):
                return rule
        return None


def refused_message(host: str, address: Address, rule: str) -> str:
    """The one line a refused request fails with: the host and the rule, no secret."""
    shown = host if literal_address(host) == address else f"{host} ({address})"
    return f"egress to {shown} refused: {rule} address (pulse config set {EGRESS_ALLOW} ...)"
