"""Factories for test data: one place, plain functions."""

from __future__ import annotations

import itertools
import os
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from domains.inventory.models import Node, NodeState, Rack
from domains.inventory.seed import RackLayout, build_fabric
from domains.tenancy.models import Membership, Namespace, Quota, Role
from portal.environ import test_worker_index

_seq = itertools.count(1)

# Emulated trays listen on loopback addresses `127.<n>.<rack>.<slot>`. Two checkouts running
# their suites at once set different bases (TEST_TRAY_IP_BASE) so their daemons never meet.
# A suite split over workers (pytest-xdist's gw0, gw1, …) moves each worker's base on by
# WORKER_IP_STRIDE, past the highest offset a suite adds to it (tray_ip_prefix below).
WORKER_IP_STRIDE = 50
TRAY_IP_BASE = int(os.environ.get("TEST_TRAY_IP_BASE", "0")) + WORKER_IP_STRIDE * (
    test_worker_index() or 0
)
if TRAY_IP_BASE + WORKER_IP_STRIDE > 256:
    raise RuntimeError(
        f"tray addresses 127.{TRAY_IP_BASE}+ run past 127.255: lower TEST_TRAY_IP_BASE or the "
        "number of test workers (PYTEST_WORKERS)"
    )


def tray_ip_prefix(offset: int = 0) -> str:
    """`127.<base + offset>`: the first two octets of a test fabric's tray addresses."""
    assert 0 <= offset < WORKER_IP_STRIDE, f"offset {offset} would reach another worker's trays"
    return f"127.{TRAY_IP_BASE + offset}"


def make_user(username: str | None = None, *, staff: bool = False, superuser: bool = False):
    User = get_user_model()
    username = username or f"user{next(_seq)}"
    user = User.objects.create_user(
        username=username, password="pw-" + username, is_staff=staff, is_superuser=superuser
    )
    user.raw_password = "pw-" + username  # type: ignore[attr-defined]
    return user


def make_namespace(name: str | None = None, **quota: object) -> Namespace:
    ns = Namespace.objects.create(name=name or f"ns-{next(_seq)}")
    Quota.objects.create(namespace=ns, **quota)
    return ns


def add_member(user, namespace: Namespace, role: str = Role.MEMBER) -> Membership:
    return Membership.objects.create(user=user, namespace=namespace, role=role)


def make_racks(
    *layouts: str,
    ip_prefix: str | None = None,
    hostname_prefix: str = "gb",
    ready: bool = True,
    first_rack: int = 1,
) -> list[Rack]:
    """Racks from layout strings ("18", "9,9"); trays ready with a fresh heartbeat."""
    racks = build_fabric(
        [RackLayout.parse(text) for text in (layouts or ("18",))],
        ip_prefix=ip_prefix or tray_ip_prefix(),
        hostname_prefix=hostname_prefix,
        node_state=NodeState.READY if ready else NodeState.UNKNOWN,
        first_rack=first_rack,
    )
    if ready:
        Node.objects.filter(rack__in=racks).update(last_heartbeat=timezone.now())
    return racks


def stale_heartbeat(node: Node, age: timedelta = timedelta(minutes=5)) -> None:
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now() - age)
