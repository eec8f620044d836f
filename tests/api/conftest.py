"""API test fixtures: a client per role, each signed in with its own real bearer token."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from domains.audit.events import SYSTEM
from domains.computedomains.models import (
    ApprovalState,
    ChannelAllocation,
    ComputeDomain,
    DomainMember,
    MemberState,
    Phase,
)
from domains.inventory.models import Node
from domains.tenancy.tokens import token_create
from testbed import factories

ROLES = ["anonymous", "other_tenant", "viewer", "member", "operator", "admin"]
IP_PREFIX = "127.14"  # helper 4's loopback range (brief: 127.(10+N).<rack>.<slot>)


def bearer_client(user: Any | None, **token_opts: Any) -> APIClient:
    client = APIClient()
    if user is not None:
        _, raw = token_create(actor=SYSTEM, user=user, name="tests", **token_opts)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        client.user = user  # type: ignore[attr-defined]
    return client


@pytest.fixture
def fabric(db):
    """One NVL72 rack (18 ready trays, one clique) in this helper's address range."""
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    return rack


@pytest.fixture
def users(ns_a, tenant_a, viewer_a, tenant_b, operator, admin) -> dict[str, Any]:
    return {
        "anonymous": None,
        "other_tenant": tenant_b,
        "viewer": viewer_a,
        "member": tenant_a,
        "operator": operator,
        "admin": admin,
    }


@pytest.fixture
def clients(users) -> dict[str, APIClient]:
    return {role: bearer_client(user) for role, user in users.items()}


def make_domain(
    namespace,
    name: str,
    *,
    nodes: list[Node] = (),  # type: ignore[assignment]
    phase: str = Phase.READY,
    approval: str = ApprovalState.NOT_REQUIRED,
    requested_by: Any = None,
) -> ComputeDomain:
    """A domain as the controller would have left it (test set-up, not a code path)."""
    now = timezone.now()
    domain = ComputeDomain.objects.create(
        namespace=namespace,
        name=name,
        num_nodes=max(1, len(nodes)),
        resource_claim_template=f"{name}-channel",
        phase=phase,
        approval_state=approval,
        requested_by=requested_by,
        lifetime=timedelta(hours=24),
        admitted_at=now if phase != Phase.PENDING else None,
        placed_at=now if nodes else None,
        ready_at=now if phase == Phase.READY else None,
        lease_expires_at=now + timedelta(hours=24),
    )
    if nodes:
        ChannelAllocation.objects.create(
            clique=nodes[0].clique, channel=1 + domain.pk, domain=domain
        )
    for index, node in enumerate(nodes):
        DomainMember.objects.create(
            domain=domain,
            node=node,
            index=index,
            clique=node.clique,
            ip_address=node.management_ip,
            state=MemberState.READY if phase == Phase.READY else MemberState.CONFIGURING,
        )
    return domain


@pytest.fixture
def domain_a(fabric, ns_a, tenant_a) -> ComputeDomain:
    """A Ready 2-tray domain in team-a."""
    nodes = list(Node.objects.filter(rack=fabric).order_by("slot")[:2])
    return make_domain(ns_a, "train-a", nodes=nodes, requested_by=tenant_a)


@pytest.fixture
def domain_b(fabric, ns_b, tenant_b) -> ComputeDomain:
    """A Ready 2-tray domain in team-b, on other trays."""
    nodes = list(Node.objects.filter(rack=fabric).order_by("slot")[2:4])
    return make_domain(ns_b, "secret-b", nodes=nodes, requested_by=tenant_b)


@pytest.fixture
def pending_a(ns_a, tenant_a) -> ComputeDomain:
    """A request in team-a waiting for an admin's approval."""
    return make_domain(
        ns_a, "big-a", phase=Phase.PENDING, approval=ApprovalState.PENDING, requested_by=tenant_a
    )
