"""Demo domains, so that `make demo` opens on a fabric in use rather than an empty,
all-green one: a few requests in several phases, made through the real services.

The demo's own worker and emulated agents do the rest: the requests are placed and formed
for real once the agents have joined (Forming, then Ready), one waits for an admin's
approval (Pending), one spans two racks (an IMEX ensemble in a clique of each), one was
released before it was placed (an ended domain in the history), and one tray is cordoned
for a fan. Idempotent: nothing is asked twice.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model

from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain
from domains.computedomains.services import domain_release, domain_request
from domains.computedomains.specs import DomainSpec
from domains.errors import DomainError
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_cordon
from domains.tenancy.models import Namespace

# (namespace, user, name, trays, racks it spans (0: one clique), released at once)
DEMO_DOMAINS = (
    ("team-a", "alice", "smoke-test", 1, 0, True),
    ("team-a", "alice", "llm-pretrain", 3, 0, False),
    ("team-b", "bob", "nccl-allreduce", 4, 2, False),  # two trays in a clique of each rack
    ("team-a", "alice", "moe-large", 9, 0, False),  # above team-a's approval threshold (8)
)
CORDONED_TRAY_SLOT = 18
CORDON_REASON = "fan replacement (demo)"


def seed_demo_domains() -> list[tuple[str, str]]:
    """Request the demo's domains (and cordon one tray); returns what was done, each as
    (what it was done to: "domain" or "tray", in words)."""
    done = []
    users = get_user_model().objects
    for ns_name, username, name, trays, racks, release in DEMO_DOMAINS:
        namespace = Namespace.objects.filter(name=ns_name).first()
        user = users.filter(username=username).first()
        if namespace is None or user is None:
            continue
        if ComputeDomain.objects.filter(namespace=namespace, name=name).exists():
            continue
        actor = Actor.for_user(user)
        try:
            spec = DomainSpec(name=name, num_nodes=trays, span_racks=racks)
            domain = domain_request(actor=actor, namespace=namespace, spec=spec)
            if release:
                domain_release(actor=actor, domain=domain, reason="demo: tried and done")
        except DomainError as exc:  # a fabric too small for it: the demo goes on without
            done.append(("domain", f"{ns_name}/{name}: not requested ({exc.message})"))
            continue
        state = "requested and released" if release else f"requested ({domain.phase})"
        over = f" over {racks} racks" if racks else ""
        done.append(
            ("domain", f"{ns_name}/{name}: {trays} tray{'s' if trays != 1 else ''}{over}, {state}")
        )
    tray = Node.objects.filter(slot=CORDONED_TRAY_SLOT).order_by("rack__position").first()
    operator = users.filter(username="operator").first()
    if tray is not None and operator is not None and tray.state != NodeState.CORDONED:
        node_cordon(actor=Actor.for_user(operator), node=tray, reason=CORDON_REASON)
        done.append(("tray", f"{tray.hostname}: cordoned ({CORDON_REASON})"))
    return done
