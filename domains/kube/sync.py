"""Watches that bring Nodes, Namespaces, ComputeDomains and the pods on trays into the
portal.

Each resource runs the informer pattern by hand: LIST (remember `resourceVersion`, replay
every object through the services, and treat what is missing as deleted), then WATCH from
that version and apply each event as it comes. A watch that ends is resumed from the last
version seen; `410 Gone` (the version was compacted away) or a failed event handler forces
a fresh LIST; API errors back off exponentially. A periodic LIST (`resync`) repairs anything
a watch could have missed, but between resyncs nothing is polled.

`Watcher.step()` does one unit of that work, so tests can drive it deterministically;
`run()` repeats it until the stop event is set (the `kube_sync` command runs one thread per
resource).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.db import DatabaseError, close_old_connections
from django.db.models import F
from django.utils import timezone
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from domains.kube import services, tasks, workloads
from domains.kube.client import KubeRejected, KubeUnavailable, call, is_not_found
from domains.kube.crd import API_GROUP, API_VERSION, PLURAL, computedomain_status
from domains.kube.models import SyncState

log = logging.getLogger(__name__)

RESYNC_S = 600.0  # full relist, to repair whatever a watch could have missed
WATCH_TIMEOUT_S = 300  # server-side end of each watch request; we resume from the last version
BACKOFF_MAX_S = 30.0


class Expired(Exception):
    """The resourceVersion we watch from is gone (410): list again."""


@dataclass(frozen=True)
class Resource:
    """How to list and watch one kind, and which services hear about it."""

    name: str
    list_fn: Callable[..., Any]
    list_args: tuple[Any, ...]
    on_object: Callable[[dict[str, Any], bool], object]  # (object, seen in a full list)
    on_deleted: Callable[[dict[str, Any]], object]
    on_resync: Callable[[set[str], datetime], None]
    key: Callable[[dict[str, Any]], str]


def resources(api: client.ApiClient, enqueue: Enqueue | None = None) -> list[Resource]:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    enqueue = enqueue or Enqueue()
    return [
        Resource(
            name="nodes",
            list_fn=core.list_node,
            list_args=(),
            on_object=lambda o, _: services.kube_node_observed(
                node=services.KubeNode.from_object(o)
            ),
            on_deleted=lambda o: services.kube_node_vanished(hostname=o["metadata"]["name"]),
            on_resync=lambda names, _: services.kube_nodes_resynced(present=names),
            key=lambda o: o["metadata"]["name"],
        ),
        Resource(
            name="namespaces",
            list_fn=core.list_namespace,
            list_args=(),
            on_object=lambda o, _: _namespace_observed(o),
            on_deleted=lambda o: services.kube_namespace_vanished(name=o["metadata"]["name"]),
            on_resync=lambda names, _: services.kube_namespaces_resynced(present=names),
            key=lambda o: o["metadata"]["name"],
        ),
        Resource(
            name="computedomains",
            list_fn=custom.list_cluster_custom_object,
            list_args=(API_GROUP, API_VERSION, PLURAL),
            on_object=lambda o, listed: _computedomain_observed(
                o, enqueue, lambda name: _read_namespace(core, name), retry=listed
            ),
            on_deleted=lambda o: services.kube_computedomain_deleted(
                object_uid=o["metadata"]["uid"]
            ),
            on_resync=lambda uids, at: services.kube_computedomains_resynced(
                present=uids, listed_at=at
            ),
            key=lambda o: o["metadata"]["uid"],
        ),
        # What runs on each tray (its page's workloads): pods, with their ResourceClaims.
        Resource(
            name="pods",
            list_fn=core.list_pod_for_all_namespaces,
            list_args=(),
            on_object=lambda o, _: workloads.kube_pod_observed(pod=o),
            on_deleted=lambda o: workloads.kube_pod_deleted(uid=o["metadata"]["uid"]),
            on_resync=lambda uids, at: workloads.kube_pods_resynced(present=uids, listed_at=at),
            key=lambda o: o["metadata"]["uid"],
        ),
    ]


class Enqueue:
    """Follow-up writes to the cluster go through Celery (retried, never lost)."""

    def publish(self, domain_id: int) -> None:
        tasks.publish_domain.delay(domain_id)

    def refusal(self, refusal_id: int) -> None:
        tasks.report_refusal.delay(refusal_id)


def _namespace_observed(obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    if (obj.get("status") or {}).get("phase") == "Terminating":
        services.kube_namespace_vanished(name=name)
        return
    services.kube_namespace_observed(name=name, labels=dict(obj["metadata"].get("labels") or {}))


def _read_namespace(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    try:
        resp: Any = call(core.read_namespace, name, _preload_content=False)  # raw, as watched
    except ApiException as exc:
        if is_not_found(exc):
            return None
        raise
    return cast(dict[str, Any], json.loads(resp.data))


def _computedomain_observed(
    obj: dict[str, Any],
    enqueue: Enqueue,
    read_namespace: Callable[[str], dict[str, Any] | None],
    *,
    retry: bool,
) -> None:
    """`retry`: try a refused object again (at a full list, i.e. at resync; not on each of
    its watch events, which our own refusal write causes).

    The object's namespace may not have reached the namespace watch yet (`kubectl create
    namespace` and `kubectl apply` a moment apart; both lists at start run in parallel):
    then it is read first, so that adoption never depends on which watch hears first (a
    refusal would otherwise stand until the next resync)."""
    if obj["metadata"].get("deletionTimestamp"):
        services.kube_computedomain_deleted(object_uid=obj["metadata"]["uid"])
        return
    ns_name = obj["metadata"]["namespace"]
    if not services.kube_namespace_is_tenant(ns_name):
        namespace = read_namespace(ns_name)
        if namespace is not None:
            _namespace_observed(namespace)
    seen = services.kube_computedomain_observed(obj=obj, retry_refused=retry)
    if seen.refusal is not None and not seen.refusal.reported:
        enqueue.refusal(seen.refusal.pk)
    elif (
        seen.domain is not None
        and seen.domain.is_live
        and obj.get("status") != computedomain_status(seen.domain)
    ):
        # New, adopted, or someone changed the status we own: publish ours.
        enqueue.publish(seen.domain.pk)


class Watcher:
    """LIST + WATCH for one resource, with resync and backoff."""

    def __init__(
        self,
        resource: Resource,
        *,
        resync_s: float = RESYNC_S,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        stop: threading.Event | None = None,
    ) -> None:
        self.resource = resource
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self.stop = stop or threading.Event()
        self.version: str | None = None  # None: must list first
        self.listed_at = 0.0
        self.failures = 0

    def run(self) -> None:
        """Until stopped: step, backing off after failures (interruptible waits)."""
        while not self.stop.is_set():
            close_old_connections()
            if not self.step():
                self.stop.wait(self.backoff())

    def step(self) -> bool:
        """List if needed, else watch once. False after a failure (caller backs off)."""
        try:
            if self.version is None or time.monotonic() - self.listed_at > self.resync_s:
                self.relist()
            else:
                self.watch_once()
        except Expired:
            log.info("%s: resourceVersion %s expired; relisting", self.resource.name, self.version)
            self.version = None
            return True
        except (KubeUnavailable, KubeRejected, ApiException) as exc:
            self._failed(exc, relist=False)
            return False
        except Exception as exc:  # a handler failed: the event is lost, so list again
            log.exception("%s: handling an event failed", self.resource.name)
            self._failed(exc, relist=True)
            return False
        self.failures = 0
        return True

    def relist(self) -> None:
        started = timezone.now()
        resp = call(self.resource.list_fn, *self.resource.list_args, _preload_content=False)
        body = json.loads(resp.data)
        items = body.get("items") or []
        for obj in items:
            # One object the portal cannot take must not hold back all the others.
            try:
                self.resource.on_object(obj, True)
            except Exception as exc:
                log.exception("%s: could not apply %s", self.resource.name, self.resource.key(obj))
                self._failed(exc, relist=False)
        self.resource.on_resync({self.resource.key(o) for o in items}, started)
        self.version = body["metadata"]["resourceVersion"]
        self.listed_at = time.monotonic()
        SyncState.objects.update_or_create(
            resource=self.resource.name,
            defaults={"resource_version": self.version, "listed_at": started, "items": len(items)},
        )

    def watch_once(self) -> None:
        """One watch request: apply events until the server ends it."""
        stream = watch.Watch().stream(
            self.resource.list_fn,
            *self.resource.list_args,
            resource_version=self.version,
            timeout_seconds=self.watch_timeout_s,
            allow_watch_bookmarks=True,
        )
        try:
            for event in stream:
                self._apply(event["type"], event["raw_object"])
                if self.stop.is_set():
                    break
        except ApiException as exc:
            if exc.status == 410:
                raise Expired() from exc
            raise KubeUnavailable(f"watch failed: {exc.status} {exc.reason}") from exc
        except (OSError, ValueError) as exc:  # connection dropped mid-stream
            raise KubeUnavailable(f"watch stream broke: {exc}") from exc

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.resource.on_deleted(obj)
        elif kind in ("ADDED", "MODIFIED"):
            self.resource.on_object(obj, False)
        # BOOKMARK carries only a newer version
        self.version = obj["metadata"]["resourceVersion"]

    def _failed(self, exc: BaseException, *, relist: bool) -> None:
        self.failures += 1
        if relist:
            self.version = None
        log.warning("%s: %s (failure %d)", self.resource.name, exc, self.failures)
        try:
            state, _ = SyncState.objects.get_or_create(resource=self.resource.name)
            SyncState.objects.filter(pk=state.pk).update(
                errors=F("errors") + 1, last_error=str(exc)[:2000], last_error_at=timezone.now()
            )
        except DatabaseError:  # the database is the trouble: keep watching, retry later
            log.warning("%s: could not record the failure in the database", self.resource.name)

    def backoff(self) -> float:
        """Exponential, capped, with jitter so several watchers do not retry in step."""
        base = min(BACKOFF_MAX_S, 0.5 * 2.0 ** min(self.failures, 10))
        return base * random.uniform(0.5, 1.0)
