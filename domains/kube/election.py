"""Leader election for `kube_sync` over a `coordination.k8s.io/v1` Lease, as client-go does it.

The chart runs two kube-sync replicas: one leads and watches, the other waits to take over.
Timing follows client-go's defaults (lease 15 s, renew deadline 10 s, retry 2 s):

- A candidate takes the Lease when there is none, when it holds it already, or when the
  record has not changed for `leaseDurationSeconds` as measured on the candidate's own
  monotonic clock from when it first saw that record: no two machines' clocks are compared.
- Every write carries the `resourceVersion` it read, so of two candidates that race, the API
  server accepts one and answers the other 409.
- The leader renews every retry period. Once no renewal has succeeded for the renew
  deadline, it stops acting: `leading()` turns false at once (every handler checks it before
  it writes, `gated`), and `keep` sets the stop event so that the command exits and its pod
  restarts as a candidate. The renew deadline is shorter than the lease, so the leader has
  stopped before any candidate may take over.
- A leader told to stop (SIGTERM: a rollout, a drain) releases the Lease (holder emptied,
  duration 1 s), so the other replica takes over within a retry period, not a lease.

The kubernetes client's own `leaderelection` module blocks in `time.sleep` with no way to
stop it, never releases, and keeps renewing while the work it guards may have stopped, so
this is the small loop instead.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from domains.kube.sync import Resource

log = logging.getLogger(__name__)

LEASE_NAME = "domain-portal-kube-sync"
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Timing:
    lease_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.lease_s:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_s} / {self.renew_deadline_s} / {self.lease_s} s"
            )


class NotLeading(RuntimeError):
    """A handler was about to write while this process does not hold the Lease."""


def default_namespace() -> str:
    """The pod's namespace (POD_NAMESPACE, or the service account's), else `default`."""
    if named := os.environ.get("POD_NAMESPACE"):
        return named
    try:
        return SA_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def default_identity() -> str:
    """The pod's name (its hostname) and a random part: a restarted container is new."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _now() -> str:
    # MicroTime: RFC 3339 with exactly six fractional digits.
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Elector:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        name: str = LEASE_NAME,
        identity: str = "",
        timing: Timing | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        # Any: the requests and answers here are plain JSON (no model round trip for MicroTime)
        self.leases: Any = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.timing = timing or Timing()
        self.stop = stop or threading.Event()
        self.lost = threading.Event()  # set when the lease was lost while leading
        self.observed: tuple[str, str] = ("", "")  # (holder, resourceVersion) last seen
        self.observed_at = 0.0
        self.renewed_at = -float("inf")  # monotonic start of the last successful write
        self.holder = ""  # who holds the Lease, as last read

    # --- the record -------------------------------------------------------------------------
    def leading(self) -> bool:
        return time.monotonic() - self.renewed_at < self.timing.renew_deadline_s

    def _read(self) -> dict[str, Any] | None:
        try:
            resp = self.leases.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        lease: dict[str, Any] = json.loads(resp.data)
        return lease

    @property
    def _timeout(self) -> float:
        return self.timing.retry_s

    def try_acquire_or_renew(self) -> bool:
        started = time.monotonic()
        try:
            return self._acquire_or_renew(started)
        except ApiException as exc:  # 409: another candidate wrote first; else the API
            if exc.status != 409:
                log.warning("lease %s/%s: %s %s", self.namespace, self.name, exc.status, exc.reason)
            return False
        except OSError as exc:  # the API server is away (urllib3 errors are OSErrors)
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    def _acquire_or_renew(self, started: float) -> bool:
        now = _now()
        lease = self._read()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec({}, now, taken=True),
            }
            self.leases.create_namespaced_lease(
                self.namespace, body, _preload_content=False, _request_timeout=self._timeout
            )
            return self._held(started)
        spec = lease.get("spec") or {}
        self.holder = spec.get("holderIdentity") or ""
        record = (self.holder, lease["metadata"]["resourceVersion"])
        if record != self.observed:
            self.observed, self.observed_at = record, started
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_s)
        if self.holder not in ("", self.identity) and started - self.observed_at < duration:
            return False  # held by another, renewed within its lease as far as we can tell
        lease["spec"] = self._spec(spec, now, taken=self.holder != self.identity)
        self.leases.replace_namespaced_lease(
            self.name, self.namespace, lease, _preload_content=False, _request_timeout=self._timeout
        )
        return self._held(started)

    def _spec(self, spec: dict[str, Any], now: str, *, taken: bool) -> dict[str, Any]:
        spec = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.timing.lease_s),
            "renewTime": now,
        }
        if taken:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if self.holder else 0
            )
        return spec

    def _held(self, started: float) -> bool:
        if not self.leading():
            log.info("lease %s/%s: %s leads", self.namespace, self.name, self.identity)
        self.holder = self.identity
        self.renewed_at = started
        return True

    # --- the loops --------------------------------------------------------------------------
    def acquire(self) -> bool:
        """Wait as a candidate until this process leads (True) or is told to stop (False)."""
        while not self.stop.is_set():
            if self.try_acquire_or_renew():
                return True
            self.stop.wait(self.timing.retry_s)
        return False

    def keep(self) -> None:
        """Renew while leading (a thread); losing the lease sets `lost` and the stop event."""
        while not self.stop.wait(self.timing.retry_s):
            if self.try_acquire_or_renew() or self.leading():
                continue
            log.error(
                "lease %s/%s: not renewed for %.0f s (held by %s): stopping",
                self.namespace,
                self.name,
                self.timing.renew_deadline_s,
                self.holder or "nobody",
            )
            self.lost.set()
            self.stop.set()
            return

    def release(self) -> None:
        """Hand the Lease over at once (a graceful stop), if this process still holds it."""
        if not self.leading():
            return
        self.renewed_at = -float("inf")  # stop acting before the write, not after
        try:
            lease = self._read()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {
                **lease["spec"],
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "renewTime": _now(),
            }
            self.leases.replace_namespaced_lease(
                self.name, self.namespace, lease, _preload_content=False, _request_timeout=5
            )
            log.info("lease %s/%s: released by %s", self.namespace, self.name, self.identity)
        except (ApiException, OSError) as exc:  # it expires by itself
            log.warning("lease %s/%s: could not release: %s", self.namespace, self.name, exc)


def gated(resource: Resource, leading: Callable[[], bool]) -> Resource:
    """The resource with every handler refusing to write unless this process leads."""

    def check(fn: Callable[..., Any]) -> Callable[..., Any]:
        def handler(*args: Any) -> Any:
            if not leading():
                raise NotLeading(f"{resource.name}: not the leader; nothing written")
            return fn(*args)

        return handler

    return dataclasses.replace(
        resource,
        on_object=check(resource.on_object),
        on_deleted=check(resource.on_deleted),
        on_resync=check(resource.on_resync),
    )
