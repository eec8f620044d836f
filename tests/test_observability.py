"""/metrics, /healthz and /readyz."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from domain_portal import __version__
from domains.computedomains.models import ComputeDomain, Phase

pytestmark = pytest.mark.django_db


def test_metrics_are_refused_without_staff_session_or_token(tenant_a):
    assert Client().get("/metrics").status_code == 401
    client = Client()
    client.force_login(tenant_a)
    assert client.get("/metrics").status_code == 401


def test_metrics_accept_the_metrics_token(settings, db):
    settings.PORTAL = {**settings.PORTAL, "METRICS_TOKEN": "s3cret-metrics"}
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics")
    assert response.status_code == 200
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


def test_metrics_expose_domains_quota_nodes_and_formation_histogram(operator, ns_a, topology):
    now = timezone.now()
    domain = ComputeDomain.objects.create(
        namespace=ns_a, name="train", num_nodes=2, resource_claim_template="t", phase=Phase.READY
    )
    ComputeDomain.objects.filter(pk=domain.pk).update(
        created_at=now - timedelta(seconds=1.5), ready_at=now
    )
    client = Client()
    client.force_login(operator)
    body = client.get("/metrics").content.decode()
    assert 'portal_domains{phase="Ready",namespace="team-a"} 1' in body
    assert 'portal_domain_formation_seconds_bucket{le="1"} 0' in body
    assert 'portal_domain_formation_seconds_bucket{le="2"} 1' in body
    assert "portal_domain_formation_seconds_count 1" in body
    assert 'portal_quota_used{namespace="team-a",resource="nodes"} 2' in body
    assert 'portal_quota_limit{namespace="team-a",resource="gpus"} 48' in body
    assert 'portal_nodes{state="ready"} 18' in body
    assert "portal_node_heartbeat_age_seconds{node=" in body
    assert "portal_celery_queue_depth" in body


def test_health_endpoints_answer(db):
    assert Client().get("/healthz").json() == {"status": "ok", "version": __version__}
    ready = Client().get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "redis": "ok"}


def test_responses_carry_a_request_id(db):
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="abc-123")
    assert response["X-Request-ID"] == "abc-123"
    assert len(Client().get("/healthz")["X-Request-ID"]) == 16
