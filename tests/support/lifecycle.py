"""The steps of a domain's life that many tests take, through the real services: request a
domain, place it (as the placement task would), and report as its agents would.

    domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    all_ready(domain)      # every member's agent reports ready: the domain turns Ready
    domain_release(...)
    all_clean(domain)      # every agent reports a clean tray: the domain is Released
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import User

from agentwire.messages import ClaimRef, PeerStatus, StatusReport, Step, status_report
from domains.audit.events import Actor
from domains.computedomains.claims import claim_admit
from domains.computedomains.members import domain_member_report
from domains.computedomains.models import ComputeDomain
from domains.computedomains.placing import domain_place
from domains.computedomains.services import domain_request
from domains.computedomains.specs import DomainSpec
from domains.inventory.models import Node
from domains.tenancy.models import Namespace


def request_domain(
    namespace: Namespace, user: User, name: str = "train", **spec: Any
) -> ComputeDomain:
    """`user` requests a domain (2 trays unless `num_nodes` says otherwise)."""
    spec.setdefault("num_nodes", 2)
    return domain_request(
        actor=Actor.for_user(user), namespace=namespace, spec=DomainSpec(name=name, **spec)
    )


def place(domain: ComputeDomain) -> ComputeDomain:
    """Place an Admitted domain at once, as the placement task would."""
    placed = domain_place(domain_id=domain.pk)
    assert placed is not None, f"{domain} was not Admitted"
    return placed


def request_and_place(
    namespace: Namespace, user: User, name: str = "train", **spec: Any
) -> ComputeDomain:
    """A domain requested by `user` and placed at once (Forming, or Admitted when it does
    not fit)."""
    return place(request_domain(namespace, user, name, **spec))


def report(node: Node, domain: ComputeDomain | None, step: str, **kw: Any) -> None:
    """One agent report for `node` about `domain` at the domain's current generation."""
    if domain is not None:
        domain.refresh_from_db()
    generation = kw.pop("generation", domain.generation if domain else 0)
    domain_member_report(
        node_id=node.pk,
        report=status_report(
            domain_uid=str(domain.uid) if domain is not None else None,
            generation_applied=generation,
            step=step,
            **kw,
        ),
    )


def ready_report(domain: ComputeDomain) -> StatusReport:
    """What a member's agent reports once its daemon is READY and every peer connected."""
    domain.refresh_from_db()
    members = domain.members.order_by("index").values_list("index", "ip_address")
    return status_report(
        domain_uid=str(domain.uid),
        generation_applied=domain.generation,
        step=Step.READY,
        daemon_state="READY",
        domain_state="UP",
        peers=[PeerStatus(index=index, ip=ip, status="CONNECTED") for index, ip in members],
        message="IMEX daemon READY",
    )


def all_ready(domain: ComputeDomain) -> ComputeDomain:
    """Every member's agent reports ready (`ready_report`): the domain turns Ready."""
    ready = ready_report(domain)
    for node_id in domain.members.order_by("index").values_list("node_id", flat=True):
        domain_member_report(node_id=node_id, report=ready)
    domain.refresh_from_db()
    return domain


def all_clean(domain: ComputeDomain) -> None:
    """Every agent still holding a tray of the domain reports it clean."""
    for member in domain.members.select_related("node").filter(active=True):
        report(member.node, None, Step.IDLE, clean=True)


def run_pods(domain: ComputeDomain, *nodes: Node) -> list[ClaimRef]:
    """A pod of the domain's workload on each tray (every member's, unless named): its claim
    admitted as the tray's DRA plugin would (Kubernetes)."""
    trays = nodes or [m.node for m in domain.members.filter(active=True).select_related("node")]
    claims = []
    for node in trays:
        ref = ClaimRef(uid=str(uuid.uuid4()), namespace=domain.namespace.name,
                       name=f"{domain.name}-{node.hostname}")  # fmt: skip
        claim_admit(node=node, claim=ref, domain_uid=str(domain.uid))
        claims.append(ref)
    return claims


def form(domain: ComputeDomain) -> ComputeDomain:
    """Place the domain and report every member ready: it is Ready."""
    return all_ready(place(domain))
