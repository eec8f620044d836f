"""Fixtures for the page tests: domains driven through the real services (no ORM writes)."""

from __future__ import annotations

import pytest

from domains.computedomains.models import ComputeDomain
from tests.support.lifecycle import form, request_domain


@pytest.fixture
def ready_domain(topology, tenant_a, ns_a) -> ComputeDomain:
    return form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
