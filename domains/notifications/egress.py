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
address first and an internal one later (DNS rebinding) is refused too.
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


def address_allowed(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if any(address in net for net in allowed_networks()):
        return True
    return address.is_global and not address.is_multicast


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
