# SPDX-License-Identifier: Apache-2.0
"""Talking to the portal: join, desired state, status reports, and the nudge websocket.

The websocket carries one kind of message, "your desired state changed"; the agent then
fetches the desired state over HTTP. Losing the socket costs only latency (the poll stays).

The client remembers the newest failure of its calls other than the report itself
(`link_error`, "desired state: HTTP 500 Internal Server Error"), until that call succeeds
again: the agent sends it with every report, so that a portal which cannot serve a tray
hears so from the tray.

Every desired state is checked against the contract's JSON Schema (`agentwire.messages`)
before the agent acts on it: a document it does not understand is refused with an error
naming the field, and the tray keeps what it has (a malformed "domain" must never read as
"no domain" and tear a running job down).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import threading
from collections.abc import Callable, Iterator
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
# What the portal refuses in any text of a report (a NUL, a lone surrogate).
_NOT_IN_TEXT = re.compile(r"[\x00\ud800-\udfff]")


class PortalError(RuntimeError):
    """The portal answered with an error (status kept) or could not be reached (status 0)."""

    def __init__(self, message: str, status: int = 0, detail: str = "", what: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail or message  # the portal's own sentence, when it sent one
        # What happened, without the method and path: "HTTP 500 Internal Server Error".
        self.what = what or message


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
        what = f"not the contract's form: {where}: {error.message[:300]}"
        raise MalformedDocument(f"desired state refused: {where}: {error.message[:300]}", what=what)
    result: DesiredState = doc
    return result


class PortalClient:
    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout)
        self.node_id: int | None = None
        self.token: str = ""
        self._failed: tuple[str, str] = ("", "")  # (call, "<call>: <what happened>")

    def close(self) -> None:
        self.http.close()

    def use(self, node_id: int, token: str) -> None:
        self.node_id, self.token = node_id, token

    @property
    def link_error(self) -> str:
        """The newest failure of a call other than the report, "" once it succeeded again."""
        return self._failed[1]

    @contextlib.contextmanager
    def _link(self, call: str, *, refusals: bool = False) -> Iterator[None]:
        """Keep `call`'s failure as the link error, and clear it when `call` succeeds.
        `refusals`: a 4xx answer (but 401) is the portal's decision, not a failure."""
        try:
            yield
        except PortalError as exc:
            if not (refusals and 400 <= exc.status < 500 and exc.status != 401):
                text = _NOT_IN_TEXT.sub("", f"{call}: {exc.what}")[:2000].strip()
                self._failed = (call, text)
                raise
            self._succeeded(call)
            raise
        self._succeeded(call)

    def _succeeded(self, call: str) -> None:
        if self._failed[0] == call:
            self._failed = ("", "")

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
            what = f"no answer ({str(exc) or type(exc).__name__})"
            raise PortalError(f"{method} {path}: {exc}", what=what) from exc
        if resp.status_code >= 400:
            detail = _message_of(resp)
            what = f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
            what += f": {detail}" if detail else ""
            kind = Unauthorized if resp.status_code == 401 else PortalError
            text = resp.text[: 200 if kind is Unauthorized else 300]
            raise kind(
                f"{method} {path}: {resp.status_code} {text}", resp.status_code, detail, what
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
        with self._link("join"):
            body: JoinResponse = self._call("POST", f"{API}/join/", json=request)
        return int(body["node_id"]), str(body["token"])

    def update_facts(self, facts: NodeFacts) -> None:
        """Re-register the tray's facts and conditions under the node token."""
        with self._link("facts"):
            self._call("PUT", f"{API}/nodes/{self.node_id}/facts/", json=facts)

    def desired(self) -> DesiredState:
        with self._link("desired state"):
            return check_desired(self._call("GET", f"{API}/nodes/{self.node_id}/desired/"))

    def report(self, report: StatusReport, *, request_id: str = "") -> None:
        self._call(
            "POST", f"{API}/nodes/{self.node_id}/status/", json=report, request_id=request_id
        )

    def claim_admit(self, request: ClaimRequest) -> ClaimAdmission:
        """Ask the portal to admit a DRA claim on this tray (join the domain if it may)."""
        with self._link("claim admission", refusals=True):
            body: ClaimAdmission = self._call(
                "POST", f"{API}/nodes/{self.node_id}/claims/", json=request
            )
        return body

    def claim_leave(self, claim_uid: str) -> None:
        """The claim is unprepared here; 404 (the portal never heard of it) is fine."""
        try:
            with self._link("claim release", refusals=True):
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
