"""`/metrics` in Prometheus' text format, computed from the database at scrape time.

Everything is derived from rows (the source of truth), so any number of web processes
answer the same and nothing is lost on restart. Histograms count every domain that ever
formed or released, which keeps them monotonic as Prometheus expects.

Protected: a staff session, or `Authorization: Bearer <PORTAL_METRICS_TOKEN>`.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from domains.computedomains.models import ChannelAllocation, ComputeDomain
from domains.inventory.models import Node
from domains.tenancy.models import Quota
from domains.tenancy.selectors import is_operator, usage_by_namespace

DURATION_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 600)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: object) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


class Exposition:
    """Collects metric families and renders them in the text format."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, **labels: object) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {value:g}")

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"


def _duration_histogram(out: Exposition, name: str, help_text: str, start: str, end: str) -> None:
    duration = ExpressionWrapper(F(end) - F(start), output_field=DurationField())
    qs = ComputeDomain.objects.filter(**{f"{end}__isnull": False, f"{start}__isnull": False})
    qs = qs.annotate(d=duration)
    aggregates = {
        f"le_{i}": Count("id", filter=Q(d__lte=timedelta(seconds=b)))
        for i, b in enumerate(DURATION_BUCKETS)
    }
    row = qs.aggregate(total=Count("id"), sum=Sum("d"), **aggregates)
    seconds = row["sum"].total_seconds() if row["sum"] else 0.0
    out.family(name, "histogram", help_text)
    for i, bound in enumerate(DURATION_BUCKETS):
        out.sample(f"{name}_bucket", row[f"le_{i}"], le=bound)
    out.sample(f"{name}_bucket", row["total"], le="+Inf")
    out.sample(f"{name}_sum", round(seconds, 3))
    out.sample(f"{name}_count", row["total"])


def _domains(out: Exposition) -> None:
    out.family("portal_domains", "gauge", "ComputeDomains by phase and namespace.")
    rows = ComputeDomain.objects.values("phase", "namespace__name").annotate(n=Count("id"))
    for row in rows.order_by("namespace__name", "phase"):
        out.sample("portal_domains", row["n"], phase=row["phase"], namespace=row["namespace__name"])
    _duration_histogram(
        out,
        "portal_domain_formation_seconds",
        "Time from request to Ready.",
        "created_at",
        "ready_at",
    )
    _duration_histogram(
        out,
        "portal_domain_release_seconds",
        "Time from release request to Released.",
        "release_requested_at",
        "released_at",
    )


def _quotas(out: Exposition) -> None:
    usage = usage_by_namespace()
    out.family("portal_quota_used", "gauge", "Quota in use per namespace and resource.")
    out.family("portal_quota_limit", "gauge", "Quota limit per namespace and resource.")
    for quota in Quota.objects.select_related("namespace").order_by("namespace__name"):
        used = usage.get(quota.namespace_id, {})
        for resource, limit in (
            ("gpus", quota.max_gpus),
            ("nodes", quota.max_nodes),
            ("domains", quota.max_domains),
        ):
            ns = quota.namespace.name
            out.sample("portal_quota_used", used.get(resource, 0), namespace=ns, resource=resource)
            if limit is not None:
                out.sample("portal_quota_limit", limit, namespace=ns, resource=resource)


def _nodes(out: Exposition) -> None:
    now = timezone.now()
    nodes = Node.objects.values_list("hostname", "state", "last_heartbeat", "daemon_state")
    out.family("portal_node_heartbeat_age_seconds", "gauge", "Seconds since the agent reported.")
    states: dict[str, int] = {}
    node_states: dict[str, int] = {}
    for hostname, state, heartbeat, daemon in nodes:
        if heartbeat is not None:
            age = (now - heartbeat).total_seconds()
            out.sample("portal_node_heartbeat_age_seconds", round(age, 3), node=hostname)
        states[daemon or "NONE"] = states.get(daemon or "NONE", 0) + 1
        node_states[state] = node_states.get(state, 0) + 1
    out.family("portal_nodes", "gauge", "Trays by state.")
    for state, n in sorted(node_states.items()):
        out.sample("portal_nodes", n, state=state)
    out.family("portal_imex_daemons", "gauge", "Trays by reported IMEX daemon state.")
    for state, n in sorted(states.items()):
        out.sample("portal_imex_daemons", n, state=state)


def _channels(out: Exposition) -> None:
    out.family("portal_channels_allocated", "gauge", "IMEX channels held per clique (ledger).")
    rows = (
        ChannelAllocation.objects.filter(released_at__isnull=True)
        .values("clique__cluster_uuid", "clique__clique_id")
        .annotate(n=Count("id"))
    )
    for row in rows:
        clique = f"{row['clique__cluster_uuid']}.{row['clique__clique_id']}"
        out.sample("portal_channels_allocated", row["n"], clique=clique)
    out.family("portal_channels_capacity", "gauge", "Usable IMEX channels per clique.")
    out.sample("portal_channels_capacity", settings.PORTAL["IMEX_CHANNEL_COUNT"] - 1)


def _queues(out: Exposition, queues: Iterable[str]) -> None:
    out.family("portal_celery_queue_depth", "gauge", "Tasks waiting in each Celery queue.")
    try:
        import redis

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=1)
        for queue in queues:
            out.sample("portal_celery_queue_depth", client.llen(queue), queue=queue)
        out.sample("portal_redis_up", 1)
    except Exception:  # a dead broker is a metric, not an error page
        out.sample("portal_redis_up", 0)


def render_metrics() -> str:
    out = Exposition()
    _domains(out)
    _quotas(out)
    _nodes(out)
    _channels(out)
    _queues(out, [settings.CELERY_TASK_DEFAULT_QUEUE])
    return out.render()


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
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE)
