"""/metrics (read the way Prometheus and promtool read it), /healthz and /readyz."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)

from agentwire.messages import Step
from domain_portal import __version__
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains import tallies
from domains.computedomains.models import ComputeDomain, DomainMember, Phase
from domains.computedomains.phases import domain_fail
from domains.computedomains.services import domain_deny, domain_release, domain_request
from domains.computedomains.specs import DomainSpec
from domains.inventory.models import Gpu, Node, NodeCondition, NodeState
from domains.tenancy.services import quota_set
from testbed import factories
from tests.observability.exposition import PROMTOOL, families, needs_promtool, scrape, value
from tests.support import lifecycle
from tests.support.lifecycle import report

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def form(ns, user, name: str, nodes: int) -> ComputeDomain:
    """Request, place and bring every tray ready through the services, as agents would."""
    domain = lifecycle.form(lifecycle.request_domain(ns, user, name, num_nodes=nodes))
    assert domain.phase == Phase.READY
    return domain


def test_metrics_are_refused_without_staff_session_or_token(tenant_a):
    assert Client().get("/metrics").status_code == 401
    client = Client()
    client.force_login(tenant_a)
    assert client.get("/metrics").status_code == 401


def test_metrics_accept_the_metrics_token(settings, db):
    settings.PORTAL = {**settings.PORTAL, "METRICS_TOKEN": "s3cret-metrics"}
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


def test_metrics_expose_domains_quota_nodes_and_formation_histogram(staff, ns_a, topology):
    domain = lifecycle.request_domain(ns_a, factories.make_user(), "train", num_nodes=2)
    domain = lifecycle.place(domain)
    # Formation is placement → Ready (the wait before placement is not the trays' doing).
    earlier = timezone.now() - timedelta(seconds=1.5)
    ComputeDomain.objects.filter(pk=domain.pk).update(placed_at=earlier)
    ComputeDomain.objects.filter(pk=domain.pk).update(created_at=earlier - timedelta(hours=1))
    assert lifecycle.all_ready(domain).phase == Phase.READY  # counted as it turns Ready
    found = families(scrape(staff))
    assert value(found, "portal_domains", phase="Ready", tenant_namespace="team-a") == 1
    assert value(found, "portal_domains", phase="Degraded", tenant_namespace="team-a") == 0
    assert value(found, "portal_domain_formation_seconds_bucket", le="1.0") == 0
    assert value(found, "portal_domain_formation_seconds_bucket", le="2.0") == 1
    assert value(found, "portal_domain_formation_seconds_count") == 1
    assert value(found, "portal_domain_formation_seconds_sum") == pytest.approx(1.5, abs=0.4)
    assert value(found, "portal_quota_used", tenant_namespace="team-a", resource="nodes") == 2
    assert value(found, "portal_quota_limit", tenant_namespace="team-a", resource="gpus") == 48
    assert value(found, "portal_nodes", state="ready") == 18
    assert value(found, "portal_nodes", state="down") == 0
    assert value(found, "portal_node_heartbeat_age_seconds", node="gb-r01-t01") < 60
    queue = settings.CELERY_TASK_DEFAULT_QUEUE  # earlier tests may have left tasks in it
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    assert value(found, "portal_celery_queue_depth", queue=queue) == broker.llen(queue)
    assert value(found, "portal_redis_up") == 1
    assert value(found, "portal_build_info", version=__version__) == 1


def test_every_family_is_one_group_with_help_and_a_type(staff, ns_a, ns_b, topology):
    form(ns_a, factories.make_user(), "one", 2)
    text = scrape(staff)
    found = families(text)  # asserts that no family is split in two
    assert set(found) == {
        "portal_build_info",
        "portal_domains",
        "portal_domains_failed",
        "portal_domains_ended",
        "portal_domain_info",
        "portal_tray_info",
        "portal_gpu_info",
        "portal_tray_condition",
        "portal_domain_formation_seconds",
        "portal_domain_formation_step_seconds",
        "portal_domain_release_seconds",
        "portal_quota_used",
        "portal_quota_limit",
        "portal_node_heartbeat_age_seconds",
        "portal_nodes",
        "portal_imex_daemons",
        "portal_agents",
        "portal_agents_silent",
        "portal_trays",
        "portal_agent_stale_after_seconds",
        "portal_channels_allocated",
        "portal_channels_capacity",
        "portal_celery_queue_depth",
        "portal_redis_up",
        "portal_gpu_alert",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    }
    for family in found.values():
        assert family.documentation, f"{family.name} has no HELP"
        assert family.type != "unknown", f"{family.name} has no TYPE"
    # Each family's samples are contiguous in the text, as the format requires.
    order = [line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"]
    seen: list[str] = []
    for name in order:
        base = name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
        if not seen or seen[-1] != base:
            assert base not in seen, f"{base} appears in two places"
            seen.append(base)


@needs_promtool
def test_promtool_check_metrics_reports_nothing(staff, ns_a, topology):
    form(ns_a, factories.make_user(), "one", 2)
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=scrape(staff),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_openmetrics_is_served_to_a_scraper_that_asks_for_it(staff, ns_a, topology):
    form(ns_a, factories.make_user(), "one", 2)
    response = staff.get(
        "/metrics",
        HTTP_ACCEPT="application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    )
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    found = {f.name: f for f in openmetrics_families(response.content.decode())}
    assert found["portal_build"].type == "info"
    assert found["portal_domains_failed"].type == "counter"
    (count,) = [
        s.value
        for s in found["portal_domain_formation_step_seconds"].samples
        if s.name.endswith("_count") and s.labels == {"step": "tray_ready"}
    ]
    assert count == 2


def test_formation_steps_are_counted_as_they_complete(staff, ns_a, topology):
    """request → admitted → placed → each tray ready → Ready, at known offsets."""
    domain = lifecycle.request_domain(ns_a, factories.make_user(), "timed", num_nodes=2)
    twenty_ago = timezone.now() - timedelta(seconds=20)
    ComputeDomain.objects.filter(pk=domain.pk).update(admitted_at=twenty_ago)
    domain = lifecycle.place(domain)
    placed = timezone.now() - timedelta(seconds=4)
    ComputeDomain.objects.filter(pk=domain.pk).update(placed_at=placed)
    first, second = DomainMember.objects.filter(domain=domain).select_related("node")
    report(first.node, domain, Step.READY, daemon_state="READY", domain_state="UP")
    DomainMember.objects.filter(pk=first.pk).update(ready_at=placed + timedelta(seconds=1.5))
    report(second.node, domain, Step.READY, daemon_state="READY", domain_state="UP")
    assert ComputeDomain.objects.get(pk=domain.pk).phase == Phase.READY

    found = families(scrape(staff))
    step = "portal_domain_formation_step_seconds"
    assert value(found, f"{step}_count", step="admitted") == 1
    assert value(found, f"{step}_bucket", step="admitted", le="0.01") == 1  # admitted at once
    assert value(found, f"{step}_count", step="placed") == 1
    assert value(found, f"{step}_bucket", step="placed", le="10.0") == 0
    assert value(found, f"{step}_bucket", step="placed", le="30.0") == 1
    assert value(found, f"{step}_count", step="tray_ready") == 2
    assert value(found, f"{step}_bucket", step="tray_ready", le="1.0") == 0
    assert value(found, f"{step}_bucket", step="tray_ready", le="2.0") == 1
    assert value(found, f"{step}_bucket", step="tray_ready", le="5.0") == 2
    assert value(found, f"{step}_sum", step="tray_ready") == pytest.approx(5.5, abs=0.5)
    assert value(found, f"{step}_count", step="ready") == 1
    assert value(found, f"{step}_bucket", step="ready", le="1.0") == 1
    assert value(found, "portal_domain_formation_seconds_count") == 1


def test_a_histogram_counts_each_observation_in_its_bucket_and_above(db):
    tallies.observe(tallies.FORMATION_STEP, [0.005, 0.3, 7.0, None], label="placed")
    tallies.observe(tallies.FORMATION_STEP, [700.0, 10], label="placed")  # 10: on a bound
    buckets, total = tallies.histograms(tallies.FORMATION_STEP)["placed"]
    counts = dict(buckets)
    assert (counts[0.01], counts[0.25], counts[0.5], counts[5], counts[10]) == (1, 1, 2, 2, 4)
    assert (counts[600], counts[tallies.INF]) == (4, 5)
    assert total == pytest.approx(717.305)


def test_a_tray_recovering_later_leaves_the_formation_figures_as_they_were(staff, ns_a, topology):
    domain = form(ns_a, factories.make_user(), "recovers", 3)
    before = scrape(staff)
    member = DomainMember.objects.filter(domain=domain).select_related("node").first()
    report(member.node, domain, Step.CONFIGURING, message="daemon restarted")
    assert ComputeDomain.objects.get(pk=domain.pk).phase == Phase.DEGRADED
    degraded = families(scrape(staff))
    assert value(degraded, "portal_domains", tenant_namespace="team-a", phase="Degraded") == 1
    report(member.node, domain, Step.READY, daemon_state="READY", domain_state="UP")
    assert ComputeDomain.objects.get(pk=domain.pk).phase == Phase.READY
    assert Event.objects.filter(domain=domain, verb="member.ready").count() == 4

    def formation(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("portal_domain_formation")]

    assert formation(scrape(staff)) == formation(before)
    assert (
        value(families(before), "portal_domain_formation_step_seconds_count", step="tray_ready")
        == 3
    )


def test_failures_count_per_namespace_and_denials_are_not_failures(
    staff, ns_a, ns_b, admin, topology
):
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=1)
    user = factories.make_user()
    big = domain_request(
        actor=Actor.for_user(user), namespace=ns_a, spec=DomainSpec(name="big", num_nodes=4)
    )
    domain_deny(actor=Actor.for_user(admin), domain=big, reason="too big")
    timed_out = lifecycle.request_domain(ns_a, user, "late")
    domain_fail(domain_id=timed_out.pk, reason="FormationTimeout", message="too late")
    found = families(scrape(staff))
    assert value(found, "portal_domains_failed_total", tenant_namespace="team-a") == 1
    assert value(found, "portal_domains_failed_total", tenant_namespace="team-b") == 0
    assert (
        value(found, "portal_domains_ended_total", tenant_namespace="team-a", phase="Failed") == 2
    )
    assert (
        value(found, "portal_domains_ended_total", tenant_namespace="team-b", phase="Failed") == 0
    )
    assert not [s for s in found["portal_domains"].samples if s.labels["phase"] == "Failed"]


def test_silent_agents_channels_and_agent_versions(staff, ns_a, topology, settings):
    settings.PORTAL = {**settings.PORTAL, "IMEX_CHANNEL_COUNT": 16}
    nodes = list(Node.objects.order_by("hostname"))
    factories.stale_heartbeat(nodes[0])
    factories.stale_heartbeat(nodes[1])
    Node.objects.filter(pk=nodes[1].pk).update(state=NodeState.DOWN)
    Node.objects.filter(pk__in=[n.pk for n in nodes[2:5]]).update(agent_version="0.0.9")
    Node.objects.filter(pk__in=[n.pk for n in nodes[5:]]).update(agent_version=__version__)
    form(ns_a, factories.make_user(), "one", 2)
    found = families(scrape(staff))
    assert value(found, "portal_agents_silent") == 1  # the down tray is nobody's concern
    assert value(found, "portal_agent_stale_after_seconds") == 30
    assert value(found, "portal_node_heartbeat_age_seconds", node=nodes[0].hostname) >= 300
    assert not [
        s
        for s in found["portal_node_heartbeat_age_seconds"].samples
        if s.labels["node"] == nodes[1].hostname
    ]
    assert value(found, "portal_agents", version="0.0.9") == 3
    assert value(found, "portal_agents", version=__version__) == 13
    (clique,) = {s.labels["clique"] for s in found["portal_channels_capacity"].samples}
    assert value(found, "portal_channels_capacity", clique=clique) == 15
    assert value(found, "portal_channels_allocated", clique=clique) == 1


def test_a_scrape_costs_the_same_queries_with_ten_times_the_domains(staff, ns_a, topology):
    ns_a.quota.max_domains = 20
    ns_a.quota.save()
    user = factories.make_user()
    form(ns_a, user, "d0", 1)
    with CaptureQueriesContext(connection) as one:
        scrape(staff)
    for i in range(1, 10):
        form(ns_a, user, f"d{i}", 1)
    with CaptureQueriesContext(connection) as ten:
        scrape(staff)
    assert len(ten) == len(one)


def test_health_endpoints_answer(db):
    assert Client().get("/healthz").json() == {"status": "ok", "version": __version__}
    ready = Client().get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "redis": "ok"}


def test_responses_carry_a_request_id(db):
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="abc-123")
    assert response["X-Request-ID"] == "abc-123"
    assert len(Client().get("/healthz")["X-Request-ID"]) == 16


def test_info_series_name_each_live_domain_its_trays_and_their_gpus(staff, ns_a, topology):
    domain = form(ns_a, factories.make_user(), "train", 2)
    members = list(DomainMember.objects.filter(domain=domain).select_related("node"))
    found = families(scrape(staff))
    assert (
        value(
            found,
            "portal_domain_info",
            domain="train",
            tenant_namespace="team-a",
            uid=str(domain.uid),
            phase="Ready",
        )
        == 1
    )
    trays = {s.labels["node"]: s.labels for s in found["portal_tray_info"].samples}
    assert len(trays) == 18
    for member in members:
        labels = trays[member.node.hostname]
        assert (labels["domain"], labels["tenant_namespace"]) == ("train", "team-a")
        assert (labels["member_state"], labels["state"]) == ("ready", "ready")
        assert labels["rack"] == topology.name and labels["clique"].endswith(".0")
    free = [t for t in trays.values() if not t["domain"]]
    assert len(free) == 16 and all(t["member_state"] == "" for t in free)
    gpus = [s.labels for s in found["portal_gpu_info"].samples]
    assert len(gpus) == 18 * 4
    held = {g["UUID"] for g in gpus if g["domain"] == "train"}
    assert held == {g.uuid for m in members for g in Gpu.objects.filter(node=m.node)} and all(
        g["tenant_namespace"] == "team-a" for g in gpus if g["domain"]
    )


def test_a_degraded_domain_names_the_tray_that_is_not_ready(staff, ns_a, topology):
    domain = form(ns_a, factories.make_user(), "wobbly", 3)
    member = DomainMember.objects.filter(domain=domain).select_related("node").first()
    report(member.node, domain, Step.CONFIGURING, message="daemon restarted")
    found = families(scrape(staff))
    (info,) = found["portal_domain_info"].samples
    assert info.labels["phase"] == "Degraded"
    not_ready = [
        s.labels["node"]
        for s in found["portal_tray_info"].samples
        if s.labels["domain"] == "wobbly" and s.labels["member_state"] != "ready"
    ]
    assert not_ready == [member.node.hostname]


def test_a_released_domain_leaves_the_live_series_and_counts_as_ended(staff, ns_a, topology):
    user = factories.make_user()
    domain = form(ns_a, user, "short", 2)
    domain_release(actor=Actor.for_user(user), domain=domain)
    lifecycle.all_clean(domain)
    assert ComputeDomain.objects.get(pk=domain.pk).phase == Phase.RELEASED
    found = families(scrape(staff))
    assert not found["portal_domain_info"].samples
    assert not [s for s in found["portal_tray_info"].samples if s.labels["domain"]]
    assert (
        value(found, "portal_domains_ended_total", tenant_namespace="team-a", phase="Released") == 1
    )
    assert value(found, "portal_domains", tenant_namespace="team-a", phase="Ready") == 0


def test_tray_conditions_are_series_an_alert_can_name(staff, topology):
    node = Node.objects.order_by("hostname").first()
    NodeCondition.objects.create(
        node=node, type="FabricNotReady", blocking=True, message="x", since=timezone.now()
    )
    found = families(scrape(staff))
    assert (
        value(
            found,
            "portal_tray_condition",
            node=node.hostname,
            type="FabricNotReady",
            blocking="true",
        )
        == 1
    )


def test_a_scrape_costs_the_same_queries_with_twice_the_racks(staff, ns_a, topology):
    form(ns_a, factories.make_user(), "d0", 2)
    with CaptureQueriesContext(connection) as one:
        scrape(staff)
    factories.make_racks("18", first_rack=2, ip_prefix=factories.tray_ip_prefix(1))
    with CaptureQueriesContext(connection) as two:
        text = scrape(staff)
    assert len(two) == len(one)
    assert len(families(text)["portal_gpu_info"].samples) == 2 * 18 * 4


def test_a_silent_agent_counts_whatever_its_tray_does_and_each_tray_has_one_status(
    staff, ns_a, topology
):
    """A tray in use whose agent went silent, or a cordoned one, is still a silent agent;
    `portal_trays` counts every tray once, by the status every page shows."""
    domain = form(ns_a, factories.make_user(), "one", 2)
    held = [m.node for m in domain.members.select_related("node").order_by("index")]
    factories.stale_heartbeat(held[0])
    Node.objects.filter(pk=held[1].pk).update(state=NodeState.CORDONED)
    factories.stale_heartbeat(held[1])
    found = families(scrape(staff))
    assert value(found, "portal_agents_silent") == 2
    assert value(found, "portal_trays", status="stale") == 2
    assert value(found, "portal_trays", status="free") == 16
    assert sum(s.value for s in found["portal_trays"].samples) == 18
