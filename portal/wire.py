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
- a request body larger than `BODY_MAX` bytes (the largest any route takes: the API's
  1 MiB) is answered 413 before any of it is read: at once when its Content-Length says
  so, or as soon as a chunked body grows past it. Django's ASGI handler reads a whole body
  into a temporary file before any view (or DATA_UPLOAD_MAX_MEMORY_SIZE) could refuse it,
  and uvicorn has no such limit, so 200 MB bodies were written to disk before a 403;
- a request body not complete `BODY_TIMEOUT_S` seconds after its head is answered 408 and
  closed (2,000 connections sending a body a byte every two seconds were all still open a
  minute later);
- one client address may have at most `HEADS_PER_ADDRESS` connections whose request (head
  or body) is not yet complete; one more is answered 429 and closed at once. Until its
  request is in, a connection is anonymous (nothing has authenticated it), websocket
  handshakes included; the portal accepts a websocket only once its session or node token
  checked out, so no accepted socket is anonymous. Peers in PORTAL_TRUSTED_PROXIES are not
  capped: every client behind the proxy shares its address, and the proxy keeps its own
  limits.

Refusals of a request under /api/ answer the API's error shape (JSON with `code` and
`message`); others plain text. uvicorn's own settings do not do this: `--limit-concurrency`
counts all connections of all clients (a slow client takes a good one's place) and answers
503, and `h11_max_incomplete_event_size` belongs to the h11 protocol, not httptools.

Limits in bytes and seconds come from the environment (PORTAL_HEAD_TIMEOUT_S,
PORTAL_BODY_TIMEOUT_S, PORTAL_BODY_MAX_BYTES, PORTAL_HEADS_PER_ADDRESS), read once: uvicorn
imports this module before Django is set up.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
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
BODY_TIMEOUT_S = float(os.environ.get("PORTAL_BODY_TIMEOUT_S", "30"))
BODY_MAX = int(os.environ.get("PORTAL_BODY_MAX_BYTES", str(1 << 20)))
LINGER_S = 2.0  # how long a refused connection is read (and dropped) before it is closed

REASONS = {
    408: b"Request Timeout",
    413: b"Content Too Large",
    414: b"URI Too Long",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
}
# The API's error shape for a refusal under /api/ (portal/api/errors.py words the rest).
_API_ERRORS = {
    408: ("timeout", f"The request body did not arrive within {BODY_TIMEOUT_S:g} seconds."),
    413: ("too_large", f"The request body is larger than {BODY_MAX} bytes."),
    414: ("uri_too_long", "The request target is longer than 8 KiB."),
    429: ("throttled", "Too many requests in progress from your address."),
    431: ("header_too_large", "The request's header fields are too large."),
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
    """uvicorn's httptools protocol with limits on the request head's size and time, on the
    body's size and time, and on the requests in progress (head or body) per client
    address."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refusal = 0  # the status to answer instead of uvicorn's 400, when set
        self._refused = False  # answered and closing: whatever else comes is dropped
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._counted = ""  # the address this connection counts against while its request comes
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_bytes = 0
        self.url = b""  # uvicorn sets it when a request begins; a refusal may come first

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

    def _head_ends(self, *, body_follows: bool = False) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if body_follows:  # still anonymous and incomplete: it keeps counting
            self._body_timer = self.loop.call_later(BODY_TIMEOUT_S, self._refuse_body, 408)
            return
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
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
        kind, body = b"text/plain; charset=utf-8", REASONS[status] + b"\n"
        if self.url.startswith(b"/api/"):
            code, message = _API_ERRORS[status]
            kind, body = (
                b"application/json",
                json.dumps({"code": code, "message": message}).encode(),
            )
        retry = b"retry-after: 1\r\n" if status == 429 else b""
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\n%scontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, REASONS[status], kind, retry, len(body), body)
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
        length, chunked = self._body_announced()
        if length > BODY_MAX:
            self._refusal = 413
            raise _HeadTooLarge
        upgrade = self.parser.should_upgrade()
        self._body_bytes = 0
        self._head_ends(body_follows=(length > 0 or chunked) and not upgrade)
        super().on_headers_complete()

    def _body_announced(self) -> tuple[int, bool]:
        """(Content-Length or 0, whether the body is chunked), from the head."""
        length, chunked = 0, False
        for name, value in self.headers:
            if name == b"content-length" and value.strip().isdigit():
                length = max(length, int(value))
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        return length, chunked

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(body)
        if self._body_bytes > BODY_MAX:
            self._refuse_body(413)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._head_ends()
        super().on_message_complete()

    def _refuse_body(self, status: int) -> None:
        """Refuse a request whose body is coming (too large, too slow). Its ASGI task is
        running and waiting for the body: it is told the client left (Django then answers
        nothing), and the refusal is answered here."""
        if self._refused:
            return
        cycle = self.cycle
        if cycle is None or cycle.response_started:  # answered already: only stop reading
            self._head_ends()
            self.transport.close()
            return
        cycle.disconnected = True
        cycle.message_event.set()
        self._refuse(status)


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
