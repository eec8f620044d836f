"""Shared fixtures: fixed actors and a topology (one GB200 NVL72 rack, one clique)."""

from __future__ import annotations

import os
import sys

import pytest

from testbed import factories
from tests.support.quiet import wait_for_quiet_database


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PORTAL_TESTING", "1")
    # Emulated daemons the tests start directly run on this interpreter (as the fleet's do).
    os.environ.setdefault("IMEX_EMU_PYTHON", sys.executable)


@pytest.fixture(autouse=True)
def _quiet_before_flush(request: pytest.FixtureRequest):
    """A transactional test's database is emptied only once the processes it kept busy
    are done with it (tests/support/quiet.py). The database is set up here, before this
    fixture's own setup ends, so this teardown runs before its flush."""
    marker = request.node.get_closest_marker("django_db")
    marked = marker is not None and marker.kwargs.get("transaction", False)
    if not (marked or "transactional_db" in request.fixturenames):
        yield
        return
    request.getfixturevalue("transactional_db")
    yield
    wait_for_quiet_database()


@pytest.fixture
def ns_a(db):
    return factories.make_namespace(
        "team-a", max_gpus=48, max_nodes=12, max_domains=4, max_nodes_per_domain=12
    )


@pytest.fixture
def ns_b(db):
    return factories.make_namespace("team-b", max_gpus=24, max_nodes=6, max_domains=2)


@pytest.fixture
def tenant_a(ns_a):
    user = factories.make_user("alice")
    factories.add_member(user, ns_a, "member")
    return user


@pytest.fixture
def viewer_a(ns_a):
    user = factories.make_user("victor")
    factories.add_member(user, ns_a, "viewer")
    return user


@pytest.fixture
def tenant_b(ns_b):
    user = factories.make_user("bob")
    factories.add_member(user, ns_b, "member")
    return user


@pytest.fixture
def operator(db):
    return factories.make_user("operator", staff=True)


@pytest.fixture
def admin(db):
    return factories.make_user("admin", staff=True, superuser=True)


@pytest.fixture
def two_racks(db):
    """Two NVL72 racks, one 18-tray clique each."""
    return factories.make_racks("18", "18")


@pytest.fixture
def team_big(tenant_a):
    """A namespace with room for a domain of two racks, tenant_a a member of it."""
    namespace = factories.make_namespace("team-big")
    factories.add_member(tenant_a, namespace, "member")
    return namespace


@pytest.fixture
def topology(db):
    """One NVL72 rack: 18 ready trays in one clique."""
    (rack,) = factories.make_racks("18")
    return rack
