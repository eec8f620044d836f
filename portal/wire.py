"""What the web process accepts on the wire before a request reaches the portal: uvicorn's
protocols with limits on the request head (`python -m portal.serve` installs them).

Plain uvicorn (httptools) takes request heads of any size over any time: a websocket
handshake whose request line was over 8 KB was never answered (the websockets library
wrote its 414 into a buffer uvicorn never sent) and held its connection forever, and a
client could hold hundreds of connections open by never finishing its request head. Here:

- a request target over `REQUEST_LINE_MAX` bytes is answered 414; a header field over
  `HEADER_LINE_MAX`, more than `HEADER_COUNT_MAX` fields or over `HEADER_BYTES_MAX` bytes of
  them 431, plain HTTP and websocket handshakes alike, and the connection is closed;
- a request head not complete `HEAD_TIMEOUT_S` seconds after the connection opened (or
  after its previous request) is answered 408 and closed;
- one client address may have at most `HEADS_PER_ADDRESS` connections whose request head
  is not yet complete; one more is answered 429 and closed at once. Until its head is in,
  a connection is anonymous (nothing has authenticated it), websocket handshakes included;
  the portal accepts a websocket only once its session or node token checked out, so no
  accepted socket is anonymous. Peers in PORTAL_TRUSTED_PROXIES are not capped: every
  client behind the proxy shares its address, and the proxy keeps its own limits.

Limits in bytes and seconds come from the environment (PORTAL_HEAD_TIMEOUT_S,
PORTAL_HEADS_PER_ADDRESS), read once: uvicorn imports this module before Django is set up.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from collections import Counter
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

REQUEST_LINE_MAX = 8 * 1024
HEADER_LINE_MAX = 8 * 1024  # the websockets library's own limit on one line
HEADER_COUNT_MAX = 100
HEADER_BYTES_MAX = 32 * 1024
HEAD_TIMEOUT_S = float(os.environ.get("PORTAL_HEAD_TIMEOUT_S", "10"))
HEADS_PER_ADDRESS = int(os.environ.get("PORTAL_HEADS_PER_ADDRESS", "64"))
LINGER_S = 2.0  # how long a refused connection is read (and dropped) before it is closed

REASONS = {
    408: b"Request Timeout",
    414: b"URI Too Long",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
}

# Connections per client address whose request head is still coming, in this process.
_heads: Counter[str] = Counter()


def _trusted_proxies() -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    raw = os.environ.get("PORTAL_TRUSTED_PROXIES", "")
    return tuple(ipaddress.ip_network(p.strip(), strict=False) for p in raw.split(",") if p.strip())


_TRUSTED = _trusted_proxies()


def _capped(address: str) -> bool:
    try:
        peer = ipaddress.ip_address(address)
    except ValueError:
        return True
    return not any(peer in net for net in _TRUSTED)


class _HeadTooLarge(Exception):
    """Raised from a parser callback; httptools turns it into a parser error."""


class PortalHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with limits on the request head's size and time, and on
    the request heads in progress per client address."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refusal = 0  # the status to answer instead of uvicorn's 400, when set
        self._refused = False  # answered and closing: whatever else comes is dropped
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._counted = ""  # the address this connection counts against while its head comes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_begins()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_ends()
        super().connection_lost(exc)

    def _head_begins(self) -> None:
        if self._head_timer is not None or self.transport.is_closing():
            return
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._refuse, 408)
        address = self.client[0] if self.client else ""
        if address and _capped(address):
            self._counted = address
            _heads[address] += 1
            if _heads[address] > HEADS_PER_ADDRESS:
                self._refuse(429)

    def _head_ends(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._counted:
            _heads[self._counted] -= 1
            if _heads[self._counted] <= 0:
                del _heads[self._counted]
            self._counted = ""

    def _refuse(self, status: int) -> None:
        self._head_ends()
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        body = REASONS[status] + b"\n"
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, REASONS[status], len(body), body)
        )
        # Half-close and read on (dropping it) for a moment: closing with the rest of the
        # request unread would send a reset, and a reset can discard the answer before the
        # client reads it.
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        if self._refusal:
            self._refuse(self._refusal)
        else:
            super().send_400_response(msg)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begins()
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > REQUEST_LINE_MAX:
            self._refusal = 414
            raise _HeadTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        line = len(name) + len(value) + 4
        self._head_bytes += line
        too_many = len(self.headers) > HEADER_COUNT_MAX
        if line > HEADER_LINE_MAX or self._head_bytes > HEADER_BYTES_MAX or too_many:
            self._refusal = 431
            raise _HeadTooLarge

    def on_headers_complete(self) -> None:
        self._head_ends()
        super().on_headers_complete()


class PortalWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets protocol that sends the answer to a handshake the websockets
    library refused while parsing it (a line or a head too large for it): uvicorn leaves
    that answer in the library's buffer and the client waits forever."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.handshake_initiated and self.conn.handshake_exc is not None:
            output = self.conn.data_to_send()
            if not self.transport.is_closing():
                self.transport.write(b"".join(output))
                self.transport.close()
