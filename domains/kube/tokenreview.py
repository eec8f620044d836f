"""Agents on Kubernetes join with their pod's service-account token instead of a join token.

The agent's DaemonSet mounts a projected token that the kubelet requests for the portal's
audience (`AGENT_TOKEN_AUDIENCE`, "domain-portal"), binds to the pod and rotates before it
expires; the agent reads the file afresh at every join. The portal asks the API server
about the token with a TokenReview (authentication.k8s.io/v1, `spec.audiences` = ours) and
takes it only when all of these hold:

- `status.authenticated` (the signature, the expiry and the bound pod's existence are the
  API server's to check) and the portal's audience is in `status.audiences`;
- the user is one of the agents' ServiceAccounts, `system:serviceaccount:<ns>:<name>`
  (`AGENT_SERVICE_ACCOUNTS`);
- the token's pod runs on the node the agent claims to be: the user's extra
  `authentication.kubernetes.io/node-name`, which Kubernetes >= 1.30 sets on every
  pod-bound token. A token of the agent on node A never registers, or re-registers, node B.

No shared secret is involved, and a leaked token is worth one tray for at most its lifetime
(an hour by default), and only while its pod exists.

Reviews are cached in the process for `AGENT_TOKEN_CACHE_S` (never past the token's own
expiry), keyed by the token's SHA-256, at most `CACHE_SIZE` of them: a rack whose agents all
join again costs the API server one review per token. The checks above are made on every
join, cached review or not. A deleted pod's token is accepted for at most that long plus
the API server's own TokenReview cache (about 10 s for a success): the two windows add up,
so lower `AGENT_TOKEN_CACHE_S` where a revoked pod must lose its tray sooner.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from domains.errors import PermissionDenied, Unavailable
from domains.kube.client import KubeRejected, KubeUnavailable, api_client, call

log = logging.getLogger(__name__)

FIELD = "service_account_token"  # the join request's field the refusals name
NODE_NAME = "authentication.kubernetes.io/node-name"
POD_NAME = "authentication.kubernetes.io/pod-name"
CACHE_SIZE = 1024
REVIEW_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Review:
    """What the API server said about one token (for one audience)."""

    authenticated: bool
    username: str = ""
    audiences: tuple[str, ...] = ()
    node_name: str = ""
    pod_name: str = ""
    error: str = ""


@dataclass(frozen=True)
class AgentIdentity:
    """A verified agent: its ServiceAccount, and the pod and node its token is bound to."""

    username: str
    node_name: str
    pod_name: str


class ReviewCache:
    """A bounded, thread-safe map of token hash → Review that forgets entries at a deadline."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[float, Review]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Review | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            if item[0] <= time.monotonic():
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return item[1]

    def put(self, key: str, review: Review, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._items[key] = (time.monotonic() + ttl, review)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


REVIEWS = ReviewCache(CACHE_SIZE)


def agent_token_verify(token: str, *, hostname: str) -> AgentIdentity:
    """The agent this token proves, if it may join as `hostname`; else PermissionDenied
    (field `service_account_token`), or Unavailable when the API server did not answer.

    The refusals say what is wrong with the caller's own token, never whose it is."""
    allowed = {f"system:serviceaccount:{sa}" for sa in settings.PORTAL["AGENT_SERVICE_ACCOUNTS"]}
    if not allowed:
        raise PermissionDenied(
            "This portal takes no service-account tokens; join with a join token.", field=FIELD
        )
    audience = settings.PORTAL["AGENT_TOKEN_AUDIENCE"]
    claimed = _claims(token).get("aud")
    if isinstance(claimed, str):
        claimed = [claimed]
    if isinstance(claimed, list) and audience not in claimed:
        # A cheap, clear answer; the API server would refuse it too (audiences are checked).
        raise PermissionDenied(
            f"The service-account token is not for this portal: mount one with audience "
            f"{audience!r}.",
            field=FIELD,
        )
    review = _review(token, audience)
    if not review.authenticated or audience not in review.audiences:
        raise PermissionDenied(
            "The service-account token is not valid: the Kubernetes API server did not "
            "authenticate it (expired, its pod gone, or not issued by this cluster).",
            field=FIELD,
        )
    if review.username not in allowed:
        raise PermissionDenied(
            "The service-account token is not the node agents' service account.", field=FIELD
        )
    if not review.node_name:
        raise PermissionDenied(
            "The service-account token is bound to no node: mount a projected token "
            "(Kubernetes 1.30 or later binds it to the pod's node).",
            field=FIELD,
        )
    if review.node_name != hostname:
        raise PermissionDenied(
            f"The service-account token belongs to a pod on another node than {hostname}; an "
            "agent joins only as the node it runs on.",
            field=FIELD,
        )
    return AgentIdentity(
        username=review.username, node_name=review.node_name, pod_name=review.pod_name
    )


def _review(token: str, audience: str) -> Review:
    """The API server's TokenReview of `token` for `audience`, cached (see the module)."""
    key = hashlib.sha256(f"{audience}\0{token}".encode()).hexdigest()
    cached = REVIEWS.get(key)
    if cached is not None:
        return cached
    body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[audience]))
    try:
        answer = call(
            _authentication_api().create_token_review, body, _request_timeout=REVIEW_TIMEOUT_S
        )
    except (KubeUnavailable, KubeRejected, ApiException) as exc:
        # KubeRejected: the portal may not create TokenReviews (RBAC), an operator's to fix.
        log.warning("TokenReview failed: %s", exc)
        raise Unavailable(
            "The Kubernetes API server could not review the service-account token; try again."
        ) from exc
    review = _review_of(answer.status)
    if review.error:
        log.info("service-account token refused by the API server: %s", review.error[:300])
    ttl = min(float(settings.PORTAL["AGENT_TOKEN_CACHE_S"]), _lifetime_left(token))
    REVIEWS.put(key, review, ttl)
    return review


def _review_of(status: Any) -> Review:
    if status is None:
        return Review(authenticated=False, error="no status")
    user = status.user
    extra: dict[str, list[str]] = (user.extra if user else None) or {}

    def first(name: str) -> str:
        values = extra.get(name) or []
        return str(values[0]) if len(values) == 1 else ""  # several: not one node

    return Review(
        authenticated=bool(status.authenticated),
        username=str(user.username or "") if user else "",
        audiences=tuple(status.audiences or ()),
        node_name=first(NODE_NAME),
        pod_name=first(POD_NAME),
        error=str(status.error or ""),
    )


def _claims(token: str) -> dict[str, Any]:
    """The token's claims, unverified (only to refuse early and to bound the cache); {} when
    it is not a JWT."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, UnicodeDecodeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _lifetime_left(token: str) -> float:
    exp = _claims(token).get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return float(exp) - time.time()
    return float("inf")


_apis: dict[str, client.AuthenticationV1Api] = {}
_apis_lock = threading.Lock()


def _authentication_api() -> client.AuthenticationV1Api:
    """One API client per process (per kubeconfig): in a pod, its own token is refreshed by
    the client as the kubelet rotates it."""
    key = os.environ.get("KUBECONFIG", "")
    with _apis_lock:
        if key not in _apis:
            _apis[key] = client.AuthenticationV1Api(api_client())
        return _apis[key]
