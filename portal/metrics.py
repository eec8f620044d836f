"""`/metrics` for Prometheus, read from the database at scrape time.

Every figure comes from rows (the source of truth) when Prometheus asks, so any number of
web processes answer the same and nothing is lost on a restart. The histograms and the
counts of ended domains are counted at the transitions, in the transaction that makes each
(`domains.computedomains.tallies`), so a scrape reads a fixed number of rows however long
the history; they only grow, as Prometheus expects (`portal_domains_ended_total`). Live
domains (`portal_domains`), quotas, trays and channels are counted from their rows, which
the history does not grow; `portal.metrics_info` names each live domain, tray and GPU.
prometheus-client's custom collectors render the families (the text format or
OpenMetrics, whichever the scraper asks for), so every family has its HELP and TYPE and
its samples in one group.

Protected: a staff session, or `Authorization: Bearer <PORTAL_METRICS_TOKEN>`.

A tenant is labelled `tenant_namespace`, never `namespace`: Prometheus' Kubernetes service
discovery gives every scraped series the `namespace` of the pod it scraped (the portal's own),
and a ServiceMonitor without honorLabels would rename ours to `exported_namespace`, folding
every tenant's alert into one.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator, Sequence
from typing import cast

import redis
from django.conf import settings
from django.db.models import Count, Exists, OuterRef
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
from domains.computedomains import tallies
from domains.computedomains.models import (
    LIVE_PHASES,
    TERMINAL_PHASES,
    ChannelAllocation,
    ComputeDomain,
    DomainMember,
)
from domains.computedomains.selectors import usage_by_namespace
from domains.computedomains.traytruth import STATUS_WORDS, tray_truth
from domains.inventory.models import Clique, Node, NodeCondition, NodeState
from domains.tenancy.models import Namespace, Quota
from domains.tenancy.selectors import is_operator
from portal.metrics_gpu import GpuHealthCollector
from portal.metrics_info import InfoCollector

QUOTA_RESOURCES = (("gpus", "max_gpus"), ("nodes", "max_nodes"), ("domains", "max_domains"))
STEPS = ("admitted", "placed", "tray_ready", "ready")


def _histogram(
    family: HistogramMetricFamily,
    labels: list[str],
    counted: tuple[list[tuple[float, int]], float] | None,
    bounds: Sequence[float],
) -> None:
    """One histogram series from its tallied buckets (all at zero when nothing was counted)."""
    buckets, total = counted or ([(b, 0) for b in (*bounds, tallies.INF)], 0.0)
    family.add_metric(labels, [(floatToGoString(le), n) for le, n in buckets], total)


class DomainCollector(Collector):
    """Domains by phase, failures, and how long formation, its steps and release took."""

    def collect(self) -> Iterator[Metric]:
        namespaces = dict(Namespace.objects.order_by("name").values_list("id", "name"))
        yield from self._phases(namespaces)
        yield self._failures(namespaces)
        formation = HistogramMetricFamily(
            "portal_domain_formation_seconds",
            "Time from a domain's placement to Ready (formation; the wait for an admin's "
            'approval is portal_domain_formation_step_seconds{step="admitted"}).',
        )
        counted = tallies.histograms(tallies.FORMATION)
        _histogram(formation, [], counted.get(""), tallies.DURATION_BUCKETS)
        yield formation
        steps = HistogramMetricFamily(
            "portal_domain_formation_step_seconds",
            "Formation by step: admitted (request to admitted), placed (admitted to placed), "
            "tray_ready (placed to each tray ready), ready (last tray ready to domain Ready).",
            labels=["step"],
        )
        counted = tallies.histograms(tallies.FORMATION_STEP)
        for step in STEPS:
            _histogram(steps, [step], counted.get(step), tallies.STEP_BUCKETS)
        yield steps
        release = HistogramMetricFamily(
            "portal_domain_release_seconds", "Time from a release request to Released."
        )
        counted = tallies.histograms(tallies.RELEASE)
        _histogram(release, [], counted.get(""), tallies.DURATION_BUCKETS)
        yield release

    @staticmethod
    def _phases(namespaces: dict[int, str]) -> Iterator[Metric]:
        live = GaugeMetricFamily(
            "portal_domains",
            "Live ComputeDomains by tenant namespace and phase (portal_domain_info names them).",
            labels=["tenant_namespace", "phase"],
        )
        rows = (
            ComputeDomain.objects.filter(phase__in=LIVE_PHASES)
            .order_by()
            .values_list("namespace_id", "phase")
            .annotate(n=Count("id"))
        )
        counts = {(ns, phase): n for ns, phase, n in rows}
        for ns_id, name in namespaces.items():
            for phase in LIVE_PHASES:
                live.add_metric([name, phase], counts.get((ns_id, phase), 0))
        yield live
        # Released and Failed only grow: a counter, so that `increase()` reads them and a
        # live phase's gauge never mixes with every domain that ever ended.
        ended = CounterMetricFamily(
            "portal_domains_ended",
            "ComputeDomains that ended, by tenant namespace and final phase (Released, or "
            "Failed including an admin's denial).",
            labels=["tenant_namespace", "phase"],
        )
        tallied: dict[tuple[int, str], int] = {}
        for label, n in tallies.counters(tallies.ENDED).items():
            ns, _, final = label.partition(":")
            tallied[(int(ns), final)] = n
        for ns_id, name in namespaces.items():
            for phase in TERMINAL_PHASES:
                ended.add_metric([name, phase], tallied.get((ns_id, phase), 0))
        yield ended

    @staticmethod
    def _failures(namespaces: dict[int, str]) -> Metric:
        # Every namespace has a series from its first scrape on, so the first failure in it
        # is an increase Prometheus can see (a series born at 1 would not be).
        family = CounterMetricFamily(
            "portal_domains_failed",
            "ComputeDomains that ended Failed (an admin's denial is not a failure).",
            labels=["tenant_namespace"],
        )
        counts = tallies.counters(tallies.FAILED)
        for ns_id, name in namespaces.items():
            family.add_metric([name], counts.get(str(ns_id), 0))
        return family


class QuotaCollector(Collector):
    """What each namespace uses of its quota, and the quota."""

    def collect(self) -> Iterator[Metric]:
        usage = usage_by_namespace()
        used = GaugeMetricFamily(
            "portal_quota_used",
            "Quota in use per namespace and resource (live domains' gpus, nodes, domains).",
            labels=["tenant_namespace", "resource"],
        )
        limit = GaugeMetricFamily(
            "portal_quota_limit",
            "Quota limit per namespace and resource (absent: unlimited).",
            labels=["tenant_namespace", "resource"],
        )
        for quota in Quota.objects.select_related("namespace").order_by("namespace__name"):
            ns = quota.namespace.name
            for resource, field in QUOTA_RESOURCES:
                used.add_metric([ns, resource], usage.get(quota.namespace_id, {}).get(resource, 0))
                if getattr(quota, field) is not None:
                    limit.add_metric([ns, resource], getattr(quota, field))
        yield used
        yield limit


def _tray_rows() -> Iterable[tuple]:
    """Every tray with what its one truth (`traytruth`) needs, in one query."""
    return (
        Node.objects.order_by("hostname")
        .annotate(
            held=Exists(DomainMember.objects.filter(node=OuterRef("pk"), active=True)),
            blocked=Exists(NodeCondition.objects.filter(node=OuterRef("pk"), blocking=True)),
        )
        .values_list(
            "hostname", "state", "gone", "last_heartbeat", "daemon_state", "agent_version",
            "held", "blocked", "management_ip",
        )
    )  # fmt: skip


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
        statuses: dict[str, int] = dict.fromkeys(STATUS_WORDS, 0)
        daemons: dict[str, int] = {}
        versions: dict[str, int] = {}
        silent = 0
        for hostname, state, gone, heartbeat, daemon, version, held, blocked, ip in _tray_rows():
            states[state] = states.get(state, 0) + 1
            daemons[daemon or "NONE"] = daemons.get(daemon or "NONE", 0) + 1
            if version:
                versions[version] = versions.get(version, 0) + 1
            if heartbeat is not None and state != NodeState.DOWN and not gone:
                ages.add_metric([hostname], round((now - heartbeat).total_seconds(), 3))
            truth = tray_truth(
                state=state, gone=gone, heard=heartbeat, daemon=daemon, held=held,
                blocked=blocked, has_ip=bool(ip), now=now,
            )  # fmt: skip
            statuses[truth.status] += 1
            silent += truth.silent and state != NodeState.DOWN and not gone
        yield ages
        yield _gauge("portal_nodes", "Trays by state.", "state", states)
        yield _gauge(
            "portal_trays",
            "Trays by their one status, as every page counts them (each tray once: an "
            "operator's flag and a silent agent before the use).",
            "status",
            statuses,
        )
        yield _gauge(
            "portal_imex_daemons", "Trays by reported IMEX daemon state.", "state", daemons
        )
        yield _gauge(
            "portal_agents", "Trays by the version of the agent that joined.", "version", versions
        )
        yield GaugeMetricFamily(
            "portal_agents_silent",
            "Trays not marked down whose agent reported once but not within the stale "
            "threshold, in use or not (they are not placed, and their domains count them as "
            "silent).",
            value=silent,
        )
        yield GaugeMetricFamily(
            "portal_agent_stale_after_seconds",
            "Agent silence after which the portal counts a tray's agent as silent "
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
        InfoCollector(),
        GpuHealthCollector(),
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
