# SPDX-License-Identifier: Apache-2.0
"""Where a webhook may go: public addresses, and the networks an operator allows.

A tenant chooses a webhook's URL and a worker inside the cluster POSTs to it. Unchecked, a
subscription could make the worker reach the cloud metadata service (169.254.169.254), the
cluster's own services or the portal's database and Redis ports, and read their answers in
the delivery log: server-side request forgery. So a target must resolve only to global
addresses, or to networks listed in `PORTAL_WEBHOOK_ALLOWED_NETS` (say a company's own
receiver on 10.0.0.0/8). The check runs when the subscription is saved and again before
every delivery, and the delivery connects to the very address that was checked (the name
is not resolved a second time by the HTTP client), so a name that resolves to a public
address first and an internal one later (DNS rebinding) is refused too. An IPv6 address
that carries an IPv4 one (IPv4-mapped, -translated or -compatible, NAT64, 6to4, Teredo) is
judged as the IPv4 address it reaches; every range IANA's registries mark as not global is
refused, whether or not this Python's `is_global` knows it (`NOT_GLOBAL`).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(Exception):
    """The target may not be sent to; the message says why, in words for its owner."""


@dataclass(frozen=True)
class PinnedTarget:
    """A checked target: connect to `url` (an address), saying `host` and, for https,
    verifying the certificate for `server_name`."""

    url: str
    host: str
    server_name: str


@cache
def _allowed(nets: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(net, strict=False) for net in nets)


def allowed_networks() -> tuple[IPNetwork, ...]:
    return _allowed(tuple(settings.PORTAL["WEBHOOK_ALLOWED_NETS"]))


# IPv6 prefixes that carry an IPv4 address inside them and reach it through a translator or
# a tunnel. Python calls most of them global, so `64:ff9b::a9fe:a9fe` (the metadata service
# through NAT64) or `2002:7f00:1::1` (loopback through 6to4) would pass a plain `is_global`.
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# IPv4-translated (RFC 2765 SIIT, `::ffff:0:a.b.c.d`): Python calls it global.
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")

# Ranges IANA's special-purpose registries mark as not globally reachable (or deprecated,
# or never routed) that this Python's `is_global` still calls global: its tables predate
# them. A webhook never goes there.
NOT_GLOBAL: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(net)
    for net in (
        "0.0.0.0/8",  # "this network"
        "192.0.0.0/24",  # IETF protocol assignments (a few anycast services aside)
        "192.88.99.0/24",  # the deprecated 6to4 relay anycast
        "198.18.0.0/15",  # benchmarking
        "240.0.0.0/4",  # reserved, and the broadcast address
        "100::/64",  # discard-only
        "100:0:0:1::/64",  # dummy prefix
        "2001::/23",  # IETF protocol assignments (Teredo, 2001::/32, is judged by its parts)
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing (SRv6) SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated, still routed inside sites)
        "ff00::/8",  # multicast
    )
)


def _rfc6052(address: ipaddress.IPv6Address, prefix_len: int) -> ipaddress.IPv4Address | None:
    """The IPv4 address embedded after a NAT64 prefix of `prefix_len` bits (RFC 6052 §2.2:
    bits 64-71 are zero and skipped, the suffix after the address is zero); None where
    `address` is not a valid embedding at that length."""
    packed = address.packed
    if prefix_len == 96:
        return ipaddress.IPv4Address(packed[12:16])
    places = [i for i in range(prefix_len // 8, 16) if i != 8]
    if packed[8] or any(packed[i] for i in places[4:]):
        return None
    return ipaddress.IPv4Address(bytes(packed[i] for i in places[:4]))


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """Every IPv4 address `address` may stand for: IPv4-mapped and -compatible, NAT64 (the
    well-known /96 and each prefix length the local-use /48 may be cut at), 6to4 and Teredo
    (its server and its client). Empty for a plain IPv6 address."""
    if address.ipv4_mapped:
        return (address.ipv4_mapped,)
    if address.sixtofour:
        return (address.sixtofour,)
    if address.teredo:
        return address.teredo
    if address in _NAT64_WELL_KNOWN or address in _IPV4_TRANSLATED:
        return (ipaddress.IPv4Address(address.packed[12:16]),)
    if address in _NAT64_LOCAL:
        readings = (_rfc6052(address, n) for n in (48, 56, 64, 96))
        return tuple(dict.fromkeys(v4 for v4 in readings if v4 is not None))
    if address in _IPV4_COMPATIBLE:
        return (ipaddress.IPv4Address(address.packed[12:16]),)
    return ()


def _plainly_allowed(address: IPAddress) -> bool:
    if any(address in net for net in allowed_networks()):
        return True
    return global_address(address)


def global_address(address: IPAddress) -> bool:
    """Whether `address` is globally reachable unicast: Python's `is_global`, less every
    special-purpose range its tables lack (NOT_GLOBAL) and multicast. (Teredo addresses,
    inside 2001::/23, are judged by the IPv4 addresses in them before they get here.)"""
    if address.is_multicast or not address.is_global:
        return False
    return not any(address in net for net in NOT_GLOBAL)


def address_allowed(address: IPAddress) -> bool:
    """Whether a webhook may connect to `address`. An IPv6 spelling of an IPv4 address is
    judged as every IPv4 address it may stand for, unless the operator allows it as written."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner and not any(address in net for net in allowed_networks()):
            return all(_plainly_allowed(v4) for v4 in inner)
    return _plainly_allowed(address)


def resolve(hostname: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise EgressRefused(f"{hostname} does not resolve")
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))


def pin(url: str) -> PinnedTarget:
    """Check `url`'s every address; the target to connect to, or EgressRefused."""
    parts = urlsplit(url)
    hostname = parts.hostname
    if parts.scheme not in ("http", "https") or not hostname:
        raise EgressRefused("must be an http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise EgressRefused("has an invalid port")
    addresses = resolve(hostname, port)
    refused = [str(a) for a in addresses if not address_allowed(a)]
    if refused or not addresses:
        raise EgressRefused(
            f"{hostname} resolves to {', '.join(refused) or 'nothing'}, which is not a public "
            "address (an operator can allow a network with PORTAL_WEBHOOK_ALLOWED_NETS)"
        )
    first = addresses[0]
    literal = f"[{first}]" if first.version == 6 else str(first)
    netloc = f"{literal}:{port}"
    host = parts.netloc.rpartition("@")[2]
    return PinnedTarget(
        url=urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")),
        host=host,
        server_name=hostname,
    )
