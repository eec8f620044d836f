# SPDX-License-Identifier: Apache-2.0
"""Talking to the portal: join, desired state, status reports, and the nudge websocket.

The websocket carries one kind of message, "your desired state changed"; the agent then
fetches the desired state over HTTP. Losing the socket costs only latency (the poll stays).

Every desired state is checked against the contract's JSON Schema (`agentwire.messages`)
before the agent acts on it: a document it does not understand is refused with an error
naming the field, and the tray keeps what it has (a malformed "domain" must never read as
"no domain" and tear a running job down).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from typing import Any, cast

import httpx
import jsonschema
from jsonschema.exceptions import best_match
from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from agentwire.messages import (
    DESIRED_STATE_SCHEMA,
    ClaimAdmission,
    ClaimRequest,
    DesiredState,
    JoinRequest,
    JoinResponse,
    NodeFacts,
    StatusReport,
)

API = "/api/v1/agent"


class PortalError(RuntimeError):
    """The portal answered with an error (status kept) or could not be reached (status 0)."""

    def __init__(self, message: str, status: int = 0, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail or message  # the portal's own sentence, when it sent one


class Unauthorized(PortalError):
    """Our node token is not (or no longer) valid: join again."""


class MalformedDocument(PortalError):
    """The portal sent a document that does not follow the contract."""


_DESIRED = jsonschema.Draft202012Validator(DESIRED_STATE_SCHEMA)


def check_desired(doc: Any) -> DesiredState:
    """The document as a `DesiredState`, or `MalformedDocument` naming the first bad field."""
    error = best_match(_DESIRED.iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(the document)"
        raise MalformedDocument(f"desired state refused: {where}: {error.message[:300]}")
    result: DesiredState = doc
    return result


class PortalClient:
    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout)
        self.node_id: int | None = None
        self.token: str = ""

    def close(self) -> None:
        self.http.close()

    def use(self, node_id: int, token: str) -> None:
        self.node_id, self.token = node_id, token

    def _call(self, method: str, path: str, *, request_id: str = "", **kw: Any) -> Any:
        headers = {"Authorization": f"Node {self.token}"} if self.token else {}
        if request_id:
            headers["X-Request-ID"] = request_id  # the domain's story, end to end
        try:
            try:
                resp = self.http.request(method, path, headers=headers, **kw)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                # "Server disconnected without sending a response" or "Connection reset by
                # peer": a kept-alive connection that the portal (or a proxy before it) closed
                # as idle just as we reused it. Every call here is safe to repeat (the portal
                # answers a repeated join, report, claim or release alike), so once more, on a
                # new connection, rather than failing the agent's cycle into its backoff.
                resp = self.http.request(method, path, headers=headers, **kw)
        except httpx.HTTPError as exc:
            raise PortalError(f"{method} {path}: {exc}") from exc
        if resp.status_code == 401:
            raise Unauthorized(f"{method} {path}: 401 {resp.text[:200]}", 401)
        if resp.status_code >= 400:
            raise PortalError(
                f"{method} {path}: {resp.status_code} {resp.text[:300]}",
                resp.status_code,
                _message_of(resp),
            )
        return resp.json() if resp.content else None

    def join(
        self, facts: NodeFacts, *, join_token: str = "", service_account_token: str = ""
    ) -> tuple[int, str]:
        """Register the tray with one credential: the join token, or (Kubernetes) the pod's
        service-account token."""
        credential = (
            {"service_account_token": service_account_token}
            if service_account_token
            else {"join_token": join_token}
        )
        request = cast(JoinRequest, {**facts, **credential})
        body: JoinResponse = self._call("POST", f"{API}/join/", json=request)
        return int(body["node_id"]), str(body["token"])

    def update_facts(self, facts: NodeFacts) -> None:
        """Re-register the tray's facts and conditions under the node token."""
        self._call("PUT", f"{API}/nodes/{self.node_id}/facts/", json=facts)

    def desired(self) -> DesiredState:
        return check_desired(self._call("GET", f"{API}/nodes/{self.node_id}/desired/"))

    def report(self, report: StatusReport, *, request_id: str = "") -> None:
        self._call(
            "POST", f"{API}/nodes/{self.node_id}/status/", json=report, request_id=request_id
        )

    def claim_admit(self, request: ClaimRequest) -> ClaimAdmission:
        """Ask the portal to admit a DRA claim on this tray (join the domain if it may)."""
        body: ClaimAdmission = self._call(
            "POST", f"{API}/nodes/{self.node_id}/claims/", json=request
        )
        return body

    def claim_leave(self, claim_uid: str) -> None:
        """The claim is unprepared here; 404 (the portal never heard of it) is fine."""
        try:
            self._call("DELETE", f"{API}/nodes/{self.node_id}/claims/{claim_uid}/")
        except PortalError as exc:
            if exc.status != 404:
                raise

    @property
    def websocket_url(self) -> str:
        scheme = "wss" if self.base_url.startswith("https") else "ws"
        return f"{scheme}://{self.base_url.split('://', 1)[1]}/ws/agent/"


def _message_of(resp: httpx.Response) -> str:
    """The `message` of the portal's error body ({"code", "message", ...}), or ""."""
    try:
        doc = resp.json()
    except ValueError:
        return ""
    return str(doc.get("message") or "") if isinstance(doc, dict) else ""


class Nudger(threading.Thread):
    """Holds the websocket open and calls `on_nudge` for every "desired state changed"."""

    def __init__(
        self,
        client: PortalClient,
        on_nudge: Callable[[], None],
        stop: threading.Event,
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        super().__init__(name=f"nudge-{client.node_id}", daemon=True)
        self.client = client
        self.on_nudge = on_nudge
        self.stop_event = stop
        self.log = log

    def run(self) -> None:
        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                with ws_connect(
                    self.client.websocket_url,
                    additional_headers={"Authorization": f"Node {self.client.token}"},
                    open_timeout=10,
                    close_timeout=1,
                ) as ws:
                    backoff = 0.5
                    self.on_nudge()  # we may have missed nudges while disconnected
                    self._listen(ws)
            except (OSError, WebSocketException, TimeoutError) as exc:
                self.log.debug("nudge socket: %s", exc)
            self.stop_event.wait(backoff + random.uniform(0, backoff))
            backoff = min(backoff * 2, 15.0)

    def _listen(self, ws: ClientConnection) -> None:
        while not self.stop_event.is_set():
            try:
                raw = ws.recv(timeout=1.0)
            except TimeoutError:
                continue
            try:
                kind = json.loads(raw).get("type")
            except (ValueError, AttributeError):
                kind = None
            if kind == "desired_state_changed":
                self.on_nudge()
