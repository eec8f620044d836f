"""A phase change is one call: the compare-and-set, its event, its tally and its
announcement together, or nothing at all when another worker changed the phase first."""

from __future__ import annotations

from typing import Any

import pytest

from domains import signals
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains import tallies
from domains.computedomains.models import Phase
from domains.computedomains.phases import transition
from domains.computedomains.services import domain_request
from domains.computedomains.specs import DomainSpec

pytestmark = pytest.mark.django_db


@pytest.fixture
def heard() -> Any:
    """The phases `domain_changed` announced, in order."""
    phases: list[str] = []

    def listen(sender: Any, **kwargs: Any) -> None:
        phases.append(kwargs["phase"])

    signals.domain_changed.connect(listen, dispatch_uid="test_transitions")
    yield phases
    signals.domain_changed.disconnect(dispatch_uid="test_transitions")


def test_a_transition_writes_its_event_tally_and_announcement_together(
    topology, ns_a, tenant_a, heard, django_capture_on_commit_callbacks
):
    actor = Actor.for_user(tenant_a)
    domain = domain_request(actor=actor, namespace=ns_a, spec=DomainSpec(name="t", num_nodes=2))
    with django_capture_on_commit_callbacks(execute=True):
        changed = transition(
            domain,
            Phase.ADMITTED,
            Phase.RELEASED,
            verb="domain.released",
            actor=actor,
            says="let go",
            details=lambda d: {"generation": d.generation},
            bump=True,
            release_requested_at=domain.admitted_at,
            released_at=domain.admitted_at,
            reason="Released",
            message="let go",
        )
    assert changed and domain.phase == Phase.RELEASED
    event = Event.objects.get(domain=domain, verb="domain.released")
    assert (event.message, event.details) == ("let go", {"generation": domain.generation})
    assert heard == [Phase.RELEASED]
    assert tallies.counters(tallies.ENDED) == {f"{ns_a.pk}:{Phase.RELEASED}": 1}
    assert tallies.histograms(tallies.RELEASE)[""][1] == 0.0


def test_a_transition_that_lost_the_race_writes_nothing(
    topology, ns_a, tenant_a, heard, django_capture_on_commit_callbacks
):
    actor = Actor.for_user(tenant_a)
    domain = domain_request(actor=actor, namespace=ns_a, spec=DomainSpec(name="t", num_nodes=2))
    events = Event.objects.filter(domain=domain).count()
    with django_capture_on_commit_callbacks(execute=True):
        changed = transition(domain, Phase.READY, Phase.DEGRADED, verb="domain.degraded")
    assert not changed and domain.phase == Phase.ADMITTED
    assert Event.objects.filter(domain=domain).count() == events
    assert heard == []
    assert tallies.counters(tallies.ENDED) == {}
