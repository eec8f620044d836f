"""The agents' two hot requests, served without Django's per-request machinery.

Every tray heartbeats (`POST nodes/<id>/status/`) and reads its desired state
(`GET nodes/<id>/desired/`) every few seconds: 2,000 trays are 200+ requests a second
against one web worker. Through Django's ASGI handler each one paid for a new thread, nine
middlewares with sync/async hops, and DRF's request and response wrapping, about twice the
cost of the work itself (bench/agent_load.py).

This ASGI wrapper answers those two requests itself when they are well-formed: the same
token lookup, serializer, services and JSON encoder as portal/api/agent/views.py, run on a
small, long-lived pool of threads (Django starts a thread per request). Every
other request, and every one of these that would be answered with an error (no or unknown
token, another node's URL, a body that does not validate, a disallowed Host, plain HTTP
where HTTPS is required), goes to
Django with its body intact, so errors, the 403 audit event and the error shape have one
implementation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.http.request import split_domain_port, validate_host
from rest_framework.utils.encoders import JSONEncoder

from domains.agents.desired import desired_state
from domains.agents.heartbeats import agent_heartbeat, agent_report
from domains.agents.selectors import node_for_token
from domains.context import request_id_scope
from domains.errors import DATABASE_AWAY, database_away
from domains.health.calls import agent_call_failed
from portal.api.agent.auth import token_from_header
from portal.api.agent.serializers import ReportSerializer, canonical_report
from portal.api.parsers import MAX_BODY, loads_bounded
from portal.middleware import request_id_from

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_ROUTE = re.compile(r"^/api/v1/agent/nodes/(?P<node>[0-9]{1,18})/(?P<kind>desired|status)/?$")
_METHOD = {"desired": "GET", "status": "POST"}

# A few threads: the work holds the GIL except while PostgreSQL answers, so more threads
# only queue for it. Each borrows a connection from the pool per request, as Django does.
THREADS = 4


def _headers() -> list[tuple[bytes, bytes]]:
    """What Django's security and clickjacking middleware would add, from the same settings."""
    headers = [(b"content-type", b"application/json")]
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append((b"x-content-type-options", b"nosniff"))
    if settings.X_FRAME_OPTIONS:
        headers.append((b"x-frame-options", settings.X_FRAME_OPTIONS.encode()))
    if settings.SECURE_REFERRER_POLICY:
        headers.append((b"referrer-policy", settings.SECURE_REFERRER_POLICY.encode()))
    return headers


def _hsts() -> list[tuple[bytes, bytes]]:
    """Strict-Transport-Security as Django's SecurityMiddleware writes it, for HTTPS answers."""
    if not settings.SECURE_HSTS_SECONDS:
        return []
    value = f"max-age={settings.SECURE_HSTS_SECONDS}"
    if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
        value += "; includeSubDomains"
    if settings.SECURE_HSTS_PRELOAD:
        value += "; preload"
    return [(b"strict-transport-security", value.encode())]


class AgentFastPath:
    """ASGI middleware in front of Django: see the module docstring."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app
        self._executor: ThreadPoolExecutor | None = None
        self._headers = _headers()
        self._hsts = _hsts()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _ROUTE.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope["method"] != _METHOD[match["kind"]]:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])  # ASGI header names are lowercase bytes
        token = token_from_header(headers.get(b"authorization", b""))
        secure = scope.get("scheme") == "https"
        if not token or not _host_allowed(headers.get(b"host", b"")):
            return await self.app(scope, receive, send)
        if settings.SECURE_SSL_REDIRECT and not secure:
            return await self.app(scope, receive, send)  # Django redirects it to HTTPS
        messages, body, complete = await _read_body(receive)
        if complete and match["kind"] == "status":
            complete = headers.get(b"content-type", b"").startswith(b"application/json")
        answer = None
        if complete:
            rid = request_id_from(headers.get(b"x-request-id", b"").decode("latin-1"))
            answer = await asyncio.get_running_loop().run_in_executor(
                self._pool(), _serve, match["kind"], int(match["node"]), token, body, rid
            )
        if answer is None:
            return await self.app(scope, _replay(messages, receive), send)
        status, payload = answer
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    *self._headers,
                    *(self._hsts if secure else []),
                    (b"content-length", str(len(payload)).encode()),
                    (b"x-request-id", rid.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(THREADS, thread_name_prefix="agent-fast")
        return self._executor


def _serve(kind: str, node_id: int, token: str, body: bytes, rid: str) -> tuple[int, bytes] | None:
    """(status, JSON body), or None to let Django answer (it will answer with an error).

    Runs on a pool thread and, like Django's request_started/request_finished, returns the
    thread's database connection to the pool when it is done. Both requests are safe to run
    twice (a read; one UPDATE recording the same report), so one that lost its connection
    runs again on a fresh one: the pool's checkout check does not ask the server about a
    connection used seconds ago (portal/postgres/pool.py). Lost again, Django answers (503
    while PostgreSQL is away).
    """
    close_old_connections()
    with request_id_scope(rid):
        try:
            try:
                return _answer(kind, node_id, token, body)
            except DATABASE_AWAY as exc:
                if not database_away(exc):
                    raise  # a bug in the statement, not a lost connection: 500, once
                log.info(
                    "agent %s request for node %s lost the database (%s); again", kind, node_id, exc
                )
                connection.close()  # broken: the pool discards it
            try:
                return _answer(kind, node_id, token, body)
            except DATABASE_AWAY as exc:
                if not database_away(exc):
                    raise
                connection.close()
                return None
        except Exception as exc:
            log.exception("agent %s request for node %s failed", kind, node_id)
            _record_failure(kind, node_id, token, exc)
            message = "The portal failed to handle this request; it has been logged."
            return 500, _dumps({"code": "server_error", "message": message})
        finally:
            close_old_connections()


def _record_failure(kind: str, node_id: int, token: str, exc: Exception) -> None:
    """The portal's health condition hears of a 500 to this tray's agent (as the Django views
    record theirs), once the token is known to be the tray's: a made-up request must not
    put a tray in the operators' banner."""
    try:
        node = node_for_token(token)
    except Exception:  # the database is what fails: nobody can tell whose token it is
        connection.close()
        return
    if node is not None and node.pk == node_id:
        call = "desired state" if kind == "desired" else "status report"
        agent_call_failed(node_id=node_id, call=call, status=500, exc=exc)


def _answer(kind: str, node_id: int, token: str, body: bytes) -> tuple[int, bytes] | None:
    if kind == "status":
        return _report(node_id, token, body)
    doc = desired_state(node_id, token=token)  # None: not this tray's token
    return None if doc is None else (200, _dumps(doc))


def _report(node_id: int, token: str, body: bytes) -> tuple[int, bytes] | None:
    try:
        data = loads_bounded(body)
    except ValueError:
        return None  # Django answers with the parser's 400/413
    report = canonical_report(data)  # the agent's own form, recognised without DRF
    if report is None:
        serializer = ReportSerializer(data=data)
        if not serializer.is_valid():
            return None
        report = serializer.document()
    if not agent_heartbeat(node_id=node_id, token=token, report=report):
        node = node_for_token(token)
        if node is None or node.pk != node_id:
            return None
        agent_report(node=node, report=report)
    return 200, b'{"ok":true}'


def _dumps(data: Any) -> bytes:
    """What DRF's JSONRenderer writes with this project's settings (compact, UTF-8)."""
    return json.dumps(data, cls=JSONEncoder, ensure_ascii=False, separators=(",", ":")).encode()


def _host_allowed(host: bytes) -> bool:
    domain, _port = split_domain_port(host.decode("latin-1"))
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


async def _read_body(receive: Receive) -> tuple[list[dict[str, Any]], bytes, bool]:
    """(the messages received, the body, whether it was read whole): not whole when it is
    over MAX_BODY or the client went away, and Django is left to deal with it."""
    messages: list[dict[str, Any]] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > MAX_BODY or not message.get("more_body", False):
            break
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
    complete = messages[-1]["type"] == "http.request" and not messages[-1].get("more_body")
    return messages, body, complete and size <= MAX_BODY


def _replay(messages: list[dict[str, Any]], receive: Receive) -> Receive:
    """A `receive` that hands Django the messages already read, then the rest of the stream."""
    pending = list(messages)

    async def replay() -> dict[str, Any]:
        return pending.pop(0) if pending else await receive()

    return replay
