"""A Kubernetes API server stand-in over real HTTP, for the Kubernetes integration tests.

Kept only for what upstream's kube-apiserver (testbed/kube/cluster.py, the `cluster` marker)
cannot be made to show: error statuses on demand (`fail_next`), counted requests (`count`),
compaction at a chosen moment (`compact`, the 410 Gone relist: a real apiserver serves
watches from its watch cache, which etcd's compaction does not reach), watches cut short
(`max_watch_seconds`) and the `resource.k8s.io/v1beta1`-only API of Kubernetes 1.32 and
1.33. Schemas, DRA objects, status subresources, watches, scheduling and admission policies
are tested against the real server; the security tests' pod-bound tokens (`issue_token`)
still come from here.

The portal's official `kubernetes` client talks to it exactly as to a real API server
(kubeconfig, REST paths, JSON, streamed watches), so nothing in the client is patched.
It implements the part of the API the portal uses, with the semantics that matter:

- one global, increasing `resourceVersion`; lists return it, watches resume from it;
- watches stream newline-delimited JSON events (ADDED / MODIFIED / DELETED) and end after
  `timeoutSeconds`; a watch from a version older than the retained history gets an
  `ERROR` event with a 410 Gone status, as after etcd compaction (`compact()`);
- `create` of an existing name → 409 AlreadyExists; `replace` with a stale
  `metadata.resourceVersion` → 409 Conflict; JSON merge patches;
- custom resources with a status subresource: writes to the object ignore `status`,
  writes to `/status` change only `status` (as the CRD's `subresources: {status: {}}`);
- faults on demand: `fail_next(...)` answers matching requests with an error status;
- TokenReview (`POST /apis/authentication.k8s.io/v1/tokenreviews`) of the service-account
  tokens it issued (`issue_token`, as the kubelet asks for a pod's projected token): signed,
  with an audience and an expiry, bound to a pod; a token is authenticated only with a valid
  signature, before its expiry, for one of the audiences asked (none asked: the API
  server's own) and while its pod exists with the same uid. The user info is the API
  server's: `system:serviceaccount:<ns>:<sa>`, its groups, and the pod-name/-uid,
  node-name/-uid and credential-id extras (Kubernetes >= 1.30 adds the node's to pod-bound
  tokens). Anything else answers `authenticated: false` with an error, never an HTTP error.

Resources: nodes, namespaces, pods, events (core/v1), computedomains
(resource.nvidia.com/v1beta1) and the DRA objects of `resource.k8s.io` (resourceslices,
resourceclaims, resourceclaimtemplates, deviceclasses) in ONE version, `resource_version`
(`v1` as Kubernetes 1.34, or `v1beta1` as 1.32), which API discovery
(`GET /apis/resource.k8s.io`) announces and the other one answers 404, as on a real server.
Helpers (`put_node`, `apply`, `delete`, ...) change the
store the way kubectl or the kubelet would, emitting the same watch events.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS = {
    "nodes": Kind("", "v1", "nodes", "Node", namespaced=False),
    "namespaces": Kind("", "v1", "namespaces", "Namespace", namespaced=False),
    "pods": Kind("", "v1", "pods", "Pod", namespaced=True),
    "events": Kind("", "v1", "events", "Event", namespaced=True),
    "computedomains": Kind(
        "resource.nvidia.com",
        "v1beta1",
        "computedomains",
        "ComputeDomain",
        namespaced=True,
        status_subresource=True,
    ),
}
DRA_GROUP = "resource.k8s.io"
for _plural, _kind, _namespaced in (
    ("resourceslices", "ResourceSlice", False),
    ("resourceclaims", "ResourceClaim", True),
    ("resourceclaimtemplates", "ResourceClaimTemplate", True),
    ("deviceclasses", "DeviceClass", False),
):
    KINDS[_plural] = Kind(
        DRA_GROUP, "v1", _plural, _kind, namespaced=_namespaced, status_subresource=True
    )

Key = tuple[str, str, str]  # plural, namespace ("" when cluster-scoped), name


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    times: int


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    def body(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.status,
        }


# The API server's own audience: what a token is for when a TokenReview names none.
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class KubeMock:
    """The store, the event history and the HTTP server around them."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []  # rv, plural, type, obj
        self.rv = 100
        self.oldest = 100  # watches from a version below this get 410 Gone
        self.faults: list[Fault] = []
        # plural → check(object) returning an error text: the CRD's schema, as a real API
        # server enforces it on create, update and status writes (422 Invalid).
        self.validators: dict[str, Callable[[dict[str, Any]], str | None]] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request served
        self.resource_version = "v1"  # the one resource.k8s.io version served (or "v1beta1")
        self.cond = threading.Condition()
        self.stopping = False
        self.signing_key = secrets.token_bytes(32)  # the service-account issuer's key
        # Tests cap every watch request (a real server honours timeoutSeconds, min 1 s) so
        # that one `Watcher.step()` returns as soon as the pending events are delivered.
        self.max_watch_seconds: float | None = None
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- life ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> KubeMock:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that points the official client at this server."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "mock", "cluster": {"server": self.url}}],
            "users": [{"name": "portal", "user": {"token": "mock-token"}}],
            "contexts": [{"name": "mock", "context": {"cluster": "mock", "user": "portal"}}],
            "current-context": "mock",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # --- test helpers: change the cluster like kubectl or the kubelet would ---------------

    def put_node(
        self,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        ip: str = "",
        unschedulable: bool = False,
    ) -> dict[str, Any]:
        obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}] if ip else []},
        }
        return self.apply(obj)

    def put_pod(
        self, namespace: str, name: str, *, node: str, service_account: str = "default"
    ) -> dict[str, Any]:
        """A pod scheduled on `node` running as `service_account` (what a DaemonSet makes)."""
        if ("namespaces", "", namespace) not in self.objects:
            self.put_namespace(namespace)
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "serviceAccountName": service_account},
        }
        return self.apply(obj)

    def put_claim(self, namespace: str, name: str, *, uid: str, pod: str) -> dict[str, Any]:
        """A ResourceClaim as the scheduler leaves it for a running pod: allocated and
        reserved for `pod`, with the `uid` its tray's DRA plugin prepared (kept as given)."""
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
            "status": {
                "allocation": {"devices": {"results": []}},
                "reservedFor": [{"resource": "pods", "name": pod, "uid": str(uuid.uuid4())}],
            },
        }
        self.apply(obj)
        with self.cond:
            stored = self.objects[("resourceclaims", namespace, name)]
            stored["metadata"]["uid"] = uid
            return copy.deepcopy(stored)

    def issue_token(
        self,
        namespace: str,
        pod: str,
        *,
        audiences: tuple[str, ...] = (API_AUDIENCE,),
        expires_in: float = 3600,
    ) -> str:
        """The projected service-account token the kubelet writes into the pod: a JWT signed
        by this API server, for `audiences`, bound to the pod (and so to its node)."""
        obj = self.get("pods", pod, namespace)
        if obj is None:
            raise ValueError(f"no pod {namespace}/{pod}")
        node_name = obj["spec"]["nodeName"]
        node = self.get("nodes", node_name)
        now = int(time.time())
        claims = {
            "iss": API_AUDIENCE,
            "aud": list(audiences),
            "sub": f"system:serviceaccount:{namespace}:{obj['spec']['serviceAccountName']}",
            "iat": now,
            "nbf": now,
            "exp": now + int(expires_in),
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": obj["spec"]["serviceAccountName"]},
                "pod": {"name": pod, "uid": obj["metadata"]["uid"]},
                "node": {"name": node_name, "uid": node["metadata"]["uid"] if node else ""},
            },
        }
        head = _b64(json.dumps({"alg": "HS256", "kid": "mock"}).encode())
        body = _b64(json.dumps(claims).encode())
        return f"{head}.{body}.{self._sign(f'{head}.{body}')}"

    def _sign(self, signed: str) -> str:
        return _b64(hmac.new(self.signing_key, signed.encode(), hashlib.sha256).digest())

    def review_token(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The `status` of a TokenReview, as the API server's service-account authenticator
        answers it: every failure is `authenticated: false` with a reason."""
        token = spec.get("token") or ""
        wanted = list(spec.get("audiences") or [API_AUDIENCE])

        def refused(error: str) -> dict[str, Any]:
            return {"authenticated": False, "user": {}, "error": error}

        try:
            head, body, signature = token.split(".")
            if not hmac.compare_digest(self._sign(f"{head}.{body}"), signature):
                raise ValueError("bad signature")
            claims = json.loads(_unb64(body))
        except (ValueError, TypeError):
            return refused("[invalid bearer token, token lookup failed]")
        if claims["exp"] <= time.time():
            return refused("[invalid bearer token, service account token has expired]")
        matched = [a for a in wanted if a in claims["aud"]]
        if not matched:
            return refused(
                f"[invalid bearer token, token audiences {claims['aud']} is invalid for the "
                f"target audiences {wanted}]"
            )
        bound = claims["kubernetes.io"]
        pod = self.get("pods", bound["pod"]["name"], bound["namespace"])
        if pod is None or pod["metadata"]["uid"] != bound["pod"]["uid"]:
            return refused(
                f'[invalid bearer token, pod "{bound["pod"]["name"]}" not found or its uid changed]'
            )
        extra = {
            "authentication.kubernetes.io/credential-id": [f"JTI={claims['jti']}"],
            "authentication.kubernetes.io/pod-name": [bound["pod"]["name"]],
            "authentication.kubernetes.io/pod-uid": [bound["pod"]["uid"]],
            "authentication.kubernetes.io/node-name": [bound["node"]["name"]],
        }
        if bound["node"]["uid"]:
            extra["authentication.kubernetes.io/node-uid"] = [bound["node"]["uid"]]
        return {
            "authenticated": True,
            "audiences": matched,
            "user": {
                "username": claims["sub"],
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, claims["sub"])),
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{bound['namespace']}",
                    "system:authenticated",
                ],
                "extra": extra,
            },
        }

    def put_namespace(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        obj["metadata"]["labels"] = {"kubernetes.io/metadata.name": name, **(labels or {})}
        return self.apply(obj)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace the whole object, status included (a test's god mode)."""
        plural = _plural_of(obj["kind"])
        meta = obj["metadata"]
        with self.cond:
            key = (plural, meta.get("namespace", ""), meta["name"])
            old = self.objects.get(key)
            new = copy.deepcopy(obj)
            if old is None:
                return self._insert(key, new)
            new["metadata"] = {**old["metadata"], **new["metadata"]}
            return self._update(key, new)

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def delete(self, plural: str, name: str, namespace: str = "") -> None:
        with self.cond:
            self._delete((plural, namespace, name))

    def fail_next(self, method: str, path_regex: str, *, status: int = 500, times: int = 1) -> None:
        """The next `times` requests whose path matches get `status` (500: etcd timeout)."""
        with self.cond:
            self.faults.append(Fault(method.upper(), re.compile(path_regex), status, times))

    def compact(self) -> None:
        """Forget the event history: watches from any earlier version get 410 Gone."""
        with self.cond:
            self.history.clear()
            self.oldest = self.rv
            self.cond.notify_all()

    def count(self, method: str, path_regex: str) -> int:
        pattern = re.compile(path_regex)
        with self.cond:
            return sum(1 for m, p in self.requests if m == method and pattern.search(p))

    def api_version(self, kind: Kind) -> str:
        return (
            f"{DRA_GROUP}/{self.resource_version}" if kind.group == DRA_GROUP else kind.api_version
        )

    def discovery(self) -> dict[str, Any]:
        """`GET /apis/resource.k8s.io`: the APIGroup with the one version served."""
        version = {"groupVersion": f"{DRA_GROUP}/{self.resource_version}",
                   "version": self.resource_version}  # fmt: skip
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": DRA_GROUP,
            "versions": [version],
            "preferredVersion": version,
        }

    # --- store (callers hold self.cond) -------------------------------------------------

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _record(self, plural: str, type_: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, plural, type_, copy.deepcopy(obj)))
        self.cond.notify_all()

    def _insert(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        kind = KINDS[key[0]]
        meta = obj.setdefault("metadata", {})
        meta["name"] = key[2]
        if kind.namespaced:
            meta["namespace"] = key[1]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["generation"] = 1
        meta["resourceVersion"] = self._bump()
        obj["apiVersion"], obj["kind"] = self.api_version(kind), kind.kind
        self.objects[key] = obj
        self._record(key[0], "ADDED", obj)
        return copy.deepcopy(obj)

    def _update(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        old = self.objects[key]
        for field in ("uid", "creationTimestamp", "name", "namespace"):
            if field in old["metadata"]:
                obj["metadata"][field] = old["metadata"][field]
        if obj.get("spec") != old.get("spec"):
            obj["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        else:
            obj["metadata"]["generation"] = old["metadata"].get("generation", 1)
        if _without_version(obj) == _without_version(old):
            return copy.deepcopy(old)  # no change: no new version, no event
        obj["metadata"]["resourceVersion"] = self._bump()
        self.objects[key] = obj
        self._record(key[0], "MODIFIED", obj)
        return copy.deepcopy(obj)

    def _delete(self, key: Key) -> dict[str, Any]:
        obj = self.objects.pop(key, None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{key[0]} "{key[2]}" not found')
        obj["metadata"]["resourceVersion"] = self._bump()
        self._record(key[0], "DELETED", obj)
        return copy.deepcopy(obj)

    # --- REST verbs ---------------------------------------------------------------------

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.cond:
            self.requests.append((method, path))  # path with its query string
            for fault in self.faults:
                if fault.method in (method, "*") and fault.pattern.search(path):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def list_body(self, kind: Kind, namespace: str, selector: str = "") -> dict[str, Any]:
        """The list; `selector`: equality-based label selector (`a=b,c=d`) as kubectl's -l."""
        wanted = dict(term.split("=", 1) for term in selector.split(",") if "=" in term)
        with self.cond:
            items = [
                copy.deepcopy(o)
                for (p, ns, _), o in sorted(self.objects.items())
                if p == kind.plural
                and (not namespace or ns == namespace)
                and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
            ]
            return {
                "apiVersion": self.api_version(kind),
                "kind": f"{kind.kind}List",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }

    def create(self, kind: Kind, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("metadata", {}).get("name")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        with self.cond:
            key = (kind.plural, namespace, name)
            if kind.namespaced and ("namespaces", "", namespace) not in self.objects:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
            if key in self.objects:
                raise ApiError(409, "AlreadyExists", f'{kind.plural} "{name}" already exists')
            obj = copy.deepcopy(body)
            if kind.status_subresource:
                obj.pop("status", None)
            self._validate(kind, obj)
            return self._insert(key, obj)

    def read(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        with self.cond:
            obj = self.objects.get((kind.plural, namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
            return copy.deepcopy(obj)

    def write(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        body: dict[str, Any],
        *,
        patch: bool,
        status: bool,
    ) -> dict[str, Any]:
        """PUT or merge-PATCH of the object or of its status subresource."""
        with self.cond:
            key = (kind.plural, namespace, name)
            old = self.objects.get(key)
            if old is None:
                raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
            wanted_rv = body.get("metadata", {}).get("resourceVersion")
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has '
                    "been modified; please apply your changes to the latest version and try again",
                )
            new = merge_patch(old, body) if patch else copy.deepcopy(body)
            new.setdefault("metadata", {})
            if kind.status_subresource:
                if status:  # only status changes through /status
                    new = {**copy.deepcopy(old), "status": new.get("status")}
                    if new["status"] is None:
                        new.pop("status")
                else:  # and never through the object itself
                    new.pop("status", None)
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
            self._validate(kind, new)
            new["metadata"] = {
                **new["metadata"],
                "resourceVersion": old["metadata"]["resourceVersion"],
            }
            return self._update(key, new)

    def _validate(self, kind: Kind, obj: dict[str, Any]) -> None:
        check = self.validators.get(kind.plural)
        error = check(obj) if check else None
        if error:
            raise ApiError(422, "Invalid", f"{kind.kind} is invalid: {error}")

    def remove(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        with self.cond:
            return self._delete((kind.plural, namespace, name))

    def watch(
        self, kind: Kind, namespace: str, since: int, timeout: float
    ) -> Iterator[dict[str, Any]]:
        """Events after version `since`, until `timeout` or the server stops."""
        deadline = threading.Event()
        timer = threading.Timer(timeout, lambda: self._expire(deadline))
        timer.start()
        try:
            cursor = since
            while True:
                with self.cond:
                    expired = cursor < self.oldest  # history we still owe was compacted
                    pending = [] if expired else [h for h in self.history if h[0] > cursor]
                    if not expired and not pending:
                        if self.stopping or deadline.is_set():
                            return
                        self.cond.wait(0.5)
                        continue
                if expired:  # yielded outside the lock, like every event
                    yield _gone(cursor)
                    return
                for rv, plural, type_, obj in pending:
                    cursor = rv
                    if plural != kind.plural:
                        continue
                    if namespace and obj["metadata"].get("namespace") != namespace:
                        continue
                    yield {"type": type_, "object": obj}
        finally:
            timer.cancel()

    def _expire(self, deadline: threading.Event) -> None:
        deadline.set()
        with self.cond:
            self.cond.notify_all()


def _without_version(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def _gone(since: int) -> dict[str, Any]:
    status = ApiError(410, "Expired", f"too old resource version: {since}").body()
    return {"type": "ERROR", "object": status}


def _plural_of(kind_name: str) -> str:
    (plural,) = [p for p, k in KINDS.items() if k.kind == kind_name]
    return plural


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_CORE = re.compile(r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<rest>.*))?$")
_GROUP = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[a-z]+)(?:/(?P<rest>.*))?$"
)


def route(path: str, dra_version: str = "v1") -> tuple[Kind, str, str, str]:
    """(kind, namespace, name, subresource) for a request path."""
    if path.startswith("/api/v1/namespaces/") and path.count("/") == 4:
        return KINDS["namespaces"], "", path.rsplit("/", 1)[1], ""  # the namespace object
    match = _CORE.match(path) or _GROUP.match(path)
    if not match or match["plural"] not in KINDS:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    kind = KINDS[match["plural"]]
    if kind.group == DRA_GROUP and match.groupdict().get("version") != dra_version:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    name, _, sub = (match["rest"] or "").partition("/")
    return kind, match["ns"] or "", name, sub


def _handler(mock: KubeMock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # else each small response waits ~40 ms for an ACK

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            body = self._body()
            try:
                fault = mock.take_fault(method, self.path)
                if fault is not None:
                    raise ApiError(fault.status, "InternalError", "injected fault")
                if method == "GET" and url.path.rstrip("/") == f"/apis/{DRA_GROUP}":
                    return self._send(200, mock.discovery())
                if url.path.rstrip("/") == TOKEN_REVIEW_PATH:
                    return self._token_review(method, body)
                kind, namespace, name, sub = route(url.path, mock.resource_version)
                if method == "GET" and not name and query.get("watch") in ("true", "1"):
                    return self._watch(kind, namespace, query)
                self._send(
                    200 if method != "POST" else 201,
                    self._dispatch(method, kind, namespace, name, sub, body, query),
                )
            except ApiError as exc:
                self._send(exc.status, exc.body())

        def _dispatch(
            self,
            method: str,
            kind: Kind,
            ns: str,
            name: str,
            sub: str,
            body: Any,
            query: dict[str, str],
        ) -> dict[str, Any]:
            if sub and sub != "status":
                raise ApiError(404, "NotFound", f"no subresource {sub}")
            if not name:
                if method == "GET":
                    return mock.list_body(kind, ns, query.get("labelSelector", ""))
                if method == "POST":
                    return mock.create(kind, ns, body)
            elif method == "GET":
                return mock.read(kind, ns, name)
            elif method in ("PUT", "PATCH"):
                if method == "PATCH" and "json-patch" in self.headers.get("Content-Type", ""):
                    raise ApiError(415, "UnsupportedMediaType", "only merge patches here")
                return mock.write(
                    kind, ns, name, body, patch=method == "PATCH", status=sub == "status"
                )
            elif method == "DELETE":
                return mock.remove(kind, ns, name)
            raise ApiError(405, "MethodNotAllowed", f"{method} not allowed here")

        def _token_review(self, method: str, body: Any) -> None:
            """TokenReview is create-only and stores nothing: the review comes back as its
            `status` (201), whatever it says about the token."""
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", f"{method} not allowed on tokenreviews")
            spec = body.get("spec") if isinstance(body, dict) else None
            if not isinstance(spec, dict) or not spec.get("token"):
                raise ApiError(422, "Invalid", "TokenReview is invalid: spec.token: Required")
            review = {
                "kind": "TokenReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "spec": spec,
                "status": mock.review_token(spec),
            }
            self._send(201, review)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw) if raw else {}

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _watch(self, kind: Kind, namespace: str, query: dict[str, str]) -> None:
            since = int(query.get("resourceVersion") or mock.rv)
            timeout = float(query.get("timeoutSeconds") or 60)
            if mock.max_watch_seconds is not None:
                timeout = min(timeout, mock.max_watch_seconds)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in mock.watch(kind, namespace, since, timeout):
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


@contextmanager
def running() -> Iterator[KubeMock]:
    mock = KubeMock().start()
    try:
        yield mock
    finally:
        mock.stop()
