"""`/metrics` for Prometheus, computed from the database at scrape time.

Every figure is derived from rows (the source of truth) when Prometheus asks, so any number
of web processes answer the same and nothing is lost on a restart. Histograms count every
domain that ever completed a step, from timestamps that never change once written, which
keeps them monotonic as Prometheus expects. prometheus-client's custom collectors render
the families (the text format or OpenMetrics, whichever the scraper asks for), so every
family has its HELP and TYPE and its samples in one group.

Protected: a staff session, or `Authorization: Bearer <PORTAL_METRICS_TOKEN>`.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Any, cast

import redis
from django.conf import settings
from django.db.models import Count, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from domain_portal import __version__
from domains.computedomains.models import ChannelAllocation, ComputeDomain, Phase
from domains.computedomains.selectors import (
    formation_durations,
    formation_step_durations,
    release_durations,
    usage_by_namespace,
)
from domains.inventory.models import Clique, Node, NodeState
from domains.tenancy.models import Namespace, Quota
from domains.tenancy.selectors import is_operator

# Request → Ready and release: seconds to minutes (the formation deadline defaults to 300 s).
DURATION_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 600)
# Steps of formation: the portal's own steps take milliseconds, a tray's IMEX seconds.
STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 600)
QUOTA_RESOURCES = (("gpus", "max_gpus"), ("nodes", "max_nodes"), ("domains", "max_domains"))


def histogram(
    rows: QuerySet[Any], bounds: Sequence[float]
) -> tuple[list[tuple[str, float]], float]:
    """Cumulative bucket counts and the sum of the `duration` of `rows`, in one query."""
    counts = {
        f"le_{i}": Count("duration", filter=Q(duration__lte=timedelta(seconds=bound)))
        for i, bound in enumerate(bounds)
    }
    row = rows.aggregate(total=Count("duration"), sum=Sum("duration"), **counts)
    buckets = [(floatToGoString(b), row[f"le_{i}"]) for i, b in enumerate(bounds)]
    buckets.append(("+Inf", row["total"]))
    return buckets, row["sum"].total_seconds() if row["sum"] else 0.0


class DomainCollector(Collector):
    """Domains by phase, failures, and how long formation, its steps and release took."""

    def collect(self) -> Iterator[Metric]:
        namespaces = dict(Namespace.objects.order_by("name").values_list("id", "name"))
        yield self._phases(namespaces)
        yield self._failures(namespaces)
        formation = HistogramMetricFamily(
            "portal_domain_formation_seconds", "Time from a domain's request to Ready."
        )
        formation.add_metric([], *histogram(formation_durations(), DURATION_BUCKETS))
        yield formation
        steps = HistogramMetricFamily(
            "portal_domain_formation_step_seconds",
            "Formation by step: admitted (request to admitted), placed (admitted to placed), "
            "tray_ready (placed to each tray ready), ready (last tray ready to domain Ready).",
            labels=["step"],
        )
        for step, rows in formation_step_durations().items():
            steps.add_metric([step], *histogram(rows, STEP_BUCKETS))
        yield steps
        release = HistogramMetricFamily(
            "portal_domain_release_seconds", "Time from a release request to Released."
        )
        release.add_metric([], *histogram(release_durations(), DURATION_BUCKETS))
        yield release

    @staticmethod
    def _phases(namespaces: dict[int, str]) -> Metric:
        family = GaugeMetricFamily(
            "portal_domains",
            "ComputeDomains by namespace and phase (Released and Failed keep every domain "
            "that ever ended so).",
            labels=["namespace", "phase"],
        )
        rows = ComputeDomain.objects.order_by().values_list("namespace_id", "phase")
        counts = {(ns, phase): n for ns, phase, n in rows.annotate(n=Count("id"))}
        for ns_id, name in namespaces.items():
            for phase in Phase.values:
                family.add_metric([name, phase], counts.get((ns_id, phase), 0))
        return family

    @staticmethod
    def _failures(namespaces: dict[int, str]) -> Metric:
        # Every namespace has a series from its first scrape on, so the first failure in it
        # is an increase Prometheus can see (a series born at 1 would not be).
        family = CounterMetricFamily(
            "portal_domains_failed",
            "ComputeDomains that ended Failed (an admin's denial is not a failure).",
            labels=["namespace"],
        )
        rows = (
            ComputeDomain.objects.filter(phase=Phase.FAILED)
            .exclude(reason="Denied")
            .order_by()
            .values_list("namespace_id")
            .annotate(n=Count("id"))
        )
        counts = dict(rows)
        for ns_id, name in namespaces.items():
            family.add_metric([name], counts.get(ns_id, 0))
        return family


class QuotaCollector(Collector):
    """What each namespace uses of its quota, and the quota."""

    def collect(self) -> Iterator[Metric]:
        usage = usage_by_namespace()
        used = GaugeMetricFamily(
            "portal_quota_used",
            "Quota in use per namespace and resource (live domains' gpus, nodes, domains).",
            labels=["namespace", "resource"],
        )
        limit = GaugeMetricFamily(
            "portal_quota_limit",
            "Quota limit per namespace and resource (absent: unlimited).",
            labels=["namespace", "resource"],
        )
        for quota in Quota.objects.select_related("namespace").order_by("namespace__name"):
            ns = quota.namespace.name
            for resource, field in QUOTA_RESOURCES:
                used.add_metric([ns, resource], usage.get(quota.namespace_id, {}).get(resource, 0))
                if getattr(quota, field) is not None:
                    limit.add_metric([ns, resource], getattr(quota, field))
        yield used
        yield limit


class FleetCollector(Collector):
    """Trays, their agents and IMEX daemons, and the channel ledger."""

    def collect(self) -> Iterator[Metric]:
        yield from self._nodes()
        yield from self._channels()

    def _nodes(self) -> Iterator[Metric]:
        now = timezone.now()
        stale_after = settings.PORTAL["HEARTBEAT_STALE_AFTER"]
        ages = GaugeMetricFamily(
            "portal_node_heartbeat_age_seconds",
            "Seconds since the tray's agent last reported (trays marked down or gone are "
            "left out: nobody expects to hear from them).",
            labels=["node"],
        )
        states: dict[str, int] = dict.fromkeys(NodeState.values, 0)
        daemons: dict[str, int] = {}
        versions: dict[str, int] = {}
        silent = 0
        rows = Node.objects.order_by("hostname").values_list(
            "hostname", "state", "gone", "last_heartbeat", "daemon_state", "agent_version"
        )
        for hostname, state, gone, heartbeat, daemon, version in rows:
            states[state] = states.get(state, 0) + 1
            daemons[daemon or "NONE"] = daemons.get(daemon or "NONE", 0) + 1
            if version:
                versions[version] = versions.get(version, 0) + 1
            if heartbeat is not None and state != NodeState.DOWN and not gone:
                ages.add_metric([hostname], round((now - heartbeat).total_seconds(), 3))
            fresh = heartbeat is not None and now - heartbeat <= stale_after
            silent += state == NodeState.READY and not gone and not fresh
        yield ages
        yield _gauge("portal_nodes", "Trays by state.", "state", states)
        yield _gauge(
            "portal_imex_daemons", "Trays by reported IMEX daemon state.", "state", daemons
        )
        yield _gauge(
            "portal_agents", "Trays by the version of the agent that joined.", "version", versions
        )
        yield GaugeMetricFamily(
            "portal_agents_silent",
            "Ready trays whose agent has not reported within the stale threshold (they are "
            "not placed, and their domains count them as not ready).",
            value=silent,
        )
        yield GaugeMetricFamily(
            "portal_agent_stale_after_seconds",
            "Agent silence after which the portal counts a tray as lost "
            "(PORTAL_HEARTBEAT_STALE_S).",
            value=stale_after.total_seconds(),
        )

    def _channels(self) -> Iterator[Metric]:
        held = dict(
            ChannelAllocation.objects.filter(released_at__isnull=True)
            .order_by()
            .values_list("clique_id")
            .annotate(n=Count("id"))
        )
        capacity = settings.PORTAL["IMEX_CHANNEL_COUNT"] - 1  # channel 0 is never handed out
        allocated = GaugeMetricFamily(
            "portal_channels_allocated",
            "IMEX channels the ledger holds per clique (All-mode domains hold no rows).",
            labels=["clique"],
        )
        usable = GaugeMetricFamily(
            "portal_channels_capacity", "Usable IMEX channels per clique.", labels=["clique"]
        )
        for pk, uuid, clique_id in Clique.objects.order_by("pk").values_list(
            "pk", "cluster_uuid", "clique_id"
        ):
            allocated.add_metric([f"{uuid}.{clique_id}"], held.get(pk, 0))
            usable.add_metric([f"{uuid}.{clique_id}"], capacity)
        yield allocated
        yield usable


class QueueCollector(Collector):
    """Celery's queue in the broker, and whether the broker answers."""

    def __init__(self, queues: Iterable[str]) -> None:
        self.queues = list(queues)

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "portal_celery_queue_depth", "Tasks waiting in each Celery queue.", labels=["queue"]
        )
        client = redis.Redis.from_url(
            settings.CELERY_BROKER_URL, socket_timeout=1, socket_connect_timeout=1
        )
        try:
            for queue in self.queues:
                depth.add_metric([queue], cast(int, client.llen(queue)))  # sync client: an int
            up = 1
        except redis.RedisError:  # a dead broker is a metric, not an error page
            up = 0
        finally:
            client.close()
        yield depth
        yield GaugeMetricFamily(
            "portal_redis_up", "1 when the Celery broker (Redis) answered this scrape.", value=up
        )


class BuildCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield InfoMetricFamily(
            "portal_build", "The Domain Portal release serving /metrics.", {"version": __version__}
        )


def _gauge(name: str, help_text: str, label: str, counts: dict[str, int]) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=[label])
    for key in sorted(counts):
        family.add_metric([key], counts[key])
    return family


def registry() -> CollectorRegistry:
    """Only our collectors: no process or GC metrics, which differ between web processes."""
    reg = CollectorRegistry(auto_describe=False)  # never collects (queries) at registration
    for collector in (
        BuildCollector(),
        DomainCollector(),
        QuotaCollector(),
        FleetCollector(),
        QueueCollector([settings.CELERY_TASK_DEFAULT_QUEUE]),
    ):
        reg.register(collector)
    return reg


def _authorised(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is not None and is_operator(user):  # staff or superuser, as for the fabric view
        return True
    token = settings.PORTAL.get("METRICS_TOKEN", "")
    header = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(header, f"Bearer {token}")


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _authorised(request):
        return HttpResponse(
            "metrics need a staff session or the metrics token\n",
            status=401,
            content_type="text/plain",
        )
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry()), content_type=content_type)
