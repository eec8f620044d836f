"""What Kubernetes tells the portal, written through services.

The watches in `sync.py` turn API objects into the plain values below and call one service
per observation. Every service is idempotent — a relist replays the whole cluster through
them — records an Event as `Actor KUBERNETES` when something changed, and announces it.
Tray state changes (cordon, uncordon, mark down) go through the inventory services, domain
requests and releases through the lifecycle services: this module never re-implements them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from domains.audit.events import KUBERNETES, record_event
from domains.computedomains.models import ComputeDomain, DomainMember, DomainSource
from domains.computedomains.services import domain_release, domain_request
from domains.computedomains.specs import DomainSpec
from domains.errors import DomainError, InvalidInput
from domains.inventory.identity import clique_for, identity_hold, management_ip_refusal
from domains.inventory.models import Node, NodeSource, NodeState, Rack
from domains.inventory.services import node_cordon, node_mark_down, node_uncordon
from domains.kube.crd import UID_ANNOTATION
from domains.kube.models import PublishedDomain, RefusedComputeDomain
from domains.signals import announce_nodes
from domains.tenancy.models import Namespace, NamespaceSource
from domains.tenancy.services import namespace_create

log = logging.getLogger(__name__)

CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# Reasons that mark a state the portal set because of Kubernetes, so that only those are
# undone from Kubernetes (an operator's own cordon in the portal stays).
CORDON_REASON = "cordoned in Kubernetes (spec.unschedulable)"
GONE_REASON = "Node object deleted from Kubernetes"
UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
MAX_GPUS_PER_TRAY = 64  # a label above this is a typo, not a tray
# Never tenants, whatever their labels say.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


@dataclass(frozen=True)
class KubeNode:
    """The facts of one Node object the portal uses."""

    hostname: str
    ip: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> KubeNode:
        addresses = (obj.get("status") or {}).get("addresses") or []
        ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "")
        return cls(
            hostname=obj["metadata"]["name"],
            ip=ip,
            labels=dict(obj["metadata"].get("labels") or {}),
            unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
        )

    def clique_key(self) -> tuple[str, int] | None:
        """`<cluster uuid>.<clique id>` → (uuid, id); None without a usable label."""
        value = self.labels.get(CLIQUE_LABEL, "")
        uuid, _, clique_id = value.rpartition(".")
        if (
            not UUID_RE.match(uuid)
            or not (clique_id.isascii() and clique_id.isdigit())
            or int(clique_id) > 2**31 - 1
        ):
            return None  # no label, or malformed
        if uuid.strip("0-") == "":
            return None  # the all-zero uuid of GPUs without multi-node NVLink
        return uuid, int(clique_id)

    def gpu_count(self) -> int | None:
        value = self.labels.get(GPU_COUNT_LABEL, "")
        return (
            int(value)
            if (value.isascii() and value.isdigit()) and 0 < int(value) <= MAX_GPUS_PER_TRAY
            else None
        )


# --- nodes ---------------------------------------------------------------------------------


def kube_node_observed(*, node: KubeNode) -> Node | None:
    """Create or update the tray for a Node object; mirror `spec.unschedulable` as cordon.

    Nodes without the clique label are not trays of a Multi-Node NVLink fabric and are
    ignored, unless the portal already knows them (then the tray loses its clique).
    """
    with transaction.atomic():
        tray = Node.objects.select_for_update(of=("self",)).filter(hostname=node.hostname).first()
        key = node.clique_key()
        if tray is None and key is None:
            return None
        created = tray is None
        tray, changes = _apply(tray or Node(hostname=node.hostname), node, key)
        if changes:
            verb = "node.discovered" if created else "node.relabelled"
            record_event(
                actor=KUBERNETES,
                verb=verb,
                obj=tray,
                message=", ".join(f"{k}: {v['to']}" for k, v in changes.items())[:500],
                details=changes,
            )
            announce_nodes([tray.pk])
        _mirror_schedulable(tray, node)
        return tray


def _apply(tray: Node, node: KubeNode, key: tuple[str, int] | None) -> tuple[Node, dict[str, Any]]:
    """Copy the Node's facts onto the tray, saved; returns it and {field: {from, to}}.

    A known tray's identity (rack, clique, IP) is not Kubernetes' to change, whose Node
    labels the node itself may write: a change is held for an operator
    (domains/inventory/identity.py) and the tray waits for acceptance."""
    rack_name = node.labels.get(settings.PORTAL["KUBE_RACK_LABEL"], "")[:63]
    ip = node.ip if node.ip and not management_ip_refusal(node.ip) else ""
    held: set[str] = set()
    if tray.pk is not None:
        reported: dict[str, Any] = {"clique": f"{key[0]}.{key[1]}" if key else ""}
        reported |= {"rack": rack_name} if rack_name else {}
        reported |= {"ip": ip} if ip else {}
        held = identity_hold(node=tray, actor=KUBERNETES, reported=reported)
    rack = tray.rack
    if rack_name and "rack" not in held:
        rack = Rack.objects.get_or_create(name=rack_name)[0]
    clique = tray.clique
    if "clique" not in held:
        clique = clique_for(f"{key[0]}.{key[1]}", rack=rack) if key else None
    wanted: dict[str, Any] = {
        "rack": rack,
        "clique": clique,
        "gone": False,
        "source": NodeSource.KUBERNETES,
        "gpu_product": node.labels.get(GPU_PRODUCT_LABEL, tray.gpu_product)[:100],
        "slot": _slot(tray, rack, node),
    }
    count = node.gpu_count()
    if count is not None:
        wanted["gpu_count"] = count
    if (
        ip
        and "ip" not in held
        and not Node.objects.filter(management_ip=ip).exclude(pk=tray.pk).exists()
    ):
        wanted["management_ip"] = ip
    changes = {
        k: {"from": _plain(getattr(tray, k)), "to": _plain(v)}
        for k, v in wanted.items()
        if getattr(tray, k) != v
    }
    created = tray.pk is None
    for k, v in wanted.items():
        setattr(tray, k, v)
    if created:
        tray.state = NodeState.UNKNOWN  # ready once its agent joins and reports
        tray.save()
    elif changes:
        tray.save(update_fields=[*wanted, "updated_at"])
    return tray, changes


def _slot(tray: Node, rack: Rack | None, node: KubeNode) -> int | None:
    """The tray's slot in `rack` (the rack view draws trays by slot): the slot label's when
    configured and free, else the one it has, else the first free one."""
    if rack is None:
        return None
    taken = set(
        Node.objects.filter(rack=rack, slot__isnull=False)
        .exclude(pk=tray.pk)
        .values_list("slot", flat=True)
    )
    label = settings.PORTAL.get("KUBE_SLOT_LABEL", "")
    value = node.labels.get(label, "") if label else ""
    if (value.isascii() and value.isdigit()) and int(value) >= 1 and int(value) not in taken:
        return int(value)
    if tray.slot is not None and tray.rack_id == rack.pk and tray.slot not in taken:
        return tray.slot
    return next((s for s in range(1, rack.compute_slots + 1) if s not in taken), None)


def _plain(value: Any) -> Any:
    return str(value) if value is not None and not isinstance(value, bool | int | str) else value


def _mirror_schedulable(tray: Node, node: KubeNode) -> None:
    """Cordon while unschedulable; undo only what Kubernetes itself caused."""
    ours = tray.state_reason in (CORDON_REASON, GONE_REASON)
    back = tray.state == NodeState.DOWN or not node.unschedulable  # reappeared, or uncordoned
    if ours and back and tray.state in (NodeState.CORDONED, NodeState.DOWN):
        tray = node_uncordon(actor=KUBERNETES, node=tray, reason="schedulable in Kubernetes")
    if node.unschedulable and tray.state in (NodeState.READY, NodeState.UNKNOWN):
        node_cordon(actor=KUBERNETES, node=tray, reason=CORDON_REASON)


def kube_node_vanished(*, hostname: str) -> None:
    """The Node object is gone: mark the tray gone (and down if it serves a domain).

    A tray that was ever in a domain is kept — members and the audit log refer to it — but
    marked gone, so placement skips it; a running domain on it turns Degraded and a release
    waiting for it can finish. A tray never used is deleted.
    """
    with transaction.atomic():
        tray = (
            Node.objects.select_for_update(of=("self",))
            .filter(hostname=hostname, source=NodeSource.KUBERNETES)
            .first()
        )
        if tray is None or tray.gone:
            return
        if not DomainMember.objects.filter(node=tray).exists():
            record_event(actor=KUBERNETES, verb="node.removed", obj=tray, message=GONE_REASON)
            tray_id = tray.pk
            tray.delete()
            announce_nodes([tray_id])
            return
        Node.objects.filter(pk=tray.pk).update(gone=True)
        record_event(actor=KUBERNETES, verb="node.gone", obj=tray, message=GONE_REASON)
        announce_nodes([tray.pk])
        if DomainMember.objects.filter(node=tray, active=True).exists():
            node_mark_down(actor=KUBERNETES, node=tray, reason=GONE_REASON)


def kube_nodes_resynced(*, present: set[str]) -> None:
    """After a full list: every Kubernetes tray not in it has vanished."""
    missing = Node.objects.filter(source=NodeSource.KUBERNETES, gone=False).exclude(
        hostname__in=present
    )
    for hostname in missing.values_list("hostname", flat=True):
        kube_node_vanished(hostname=hostname)


# --- namespaces ----------------------------------------------------------------------------


def namespace_wanted(name: str, labels: dict[str, str]) -> bool:
    """A tenant unless it is a system namespace or lacks the configured label."""
    if name in SYSTEM_NAMESPACES:
        return False
    label = settings.PORTAL.get("KUBE_NAMESPACE_LABEL", "")
    if not label:
        return True
    key, _, value = label.partition("=")
    return key in labels and (not value or labels[key] == value)


def kube_namespace_observed(*, name: str, labels: dict[str, str]) -> Namespace | None:
    """Create, reactivate or (label removed) deactivate the tenant for a Namespace object."""
    if not namespace_wanted(name, labels):
        kube_namespace_vanished(name=name)
        return None
    with transaction.atomic():
        existing = Namespace.objects.select_for_update().filter(name=name).first()
        if existing is None:
            try:
                return namespace_create(
                    actor=KUBERNETES, name=name, labels=labels, source=NamespaceSource.KUBERNETES
                )
            except InvalidInput:
                log.warning("namespace %r is not a valid tenant name; skipped", name)
                return None
        if existing.source != NamespaceSource.KUBERNETES:
            return existing  # made in the portal first; the portal's word stands
        if not existing.active or existing.labels != labels:
            was_active = existing.active
            existing.active, existing.labels = True, labels
            existing.save(update_fields=["active", "labels"])
            if not was_active:
                record_event(actor=KUBERNETES, verb="namespace.reactivated", obj=existing)
        return existing


def kube_namespace_is_tenant(name: str) -> bool:
    """Whether ComputeDomains there can be adopted now (an active tenant)."""
    return Namespace.objects.filter(name=name, active=True).exists()


def kube_namespace_vanished(*, name: str) -> None:
    """Deleted (or unlabelled): no new requests there; existing domains run on."""
    with transaction.atomic():
        updated = Namespace.objects.filter(
            name=name, source=NamespaceSource.KUBERNETES, active=True
        ).update(active=False)
        if updated:
            namespace = Namespace.objects.get(name=name)
            record_event(actor=KUBERNETES, verb="namespace.deactivated", obj=namespace)


def kube_namespaces_resynced(*, present: set[str]) -> None:
    missing = Namespace.objects.filter(source=NamespaceSource.KUBERNETES, active=True).exclude(
        name__in=present
    )
    for name in missing.values_list("name", flat=True):
        kube_namespace_vanished(name=name)


# --- ComputeDomains ------------------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """What happened to a ComputeDomain object: its domain (ours or adopted) or a refusal."""

    domain: ComputeDomain | None = None
    refusal: RefusedComputeDomain | None = None
    foreign: bool = False  # ours by annotation, but no such domain: leave it alone


def kube_computedomain_observed(*, obj: dict[str, Any], retry_refused: bool = True) -> Observed:
    """Recognise a portal-published object, or adopt a kubectl-created one as a request.

    An object refused before is tried again only when `retry_refused` (at each resync):
    its spec cannot change, only the quota or the fabric around it.
    """
    meta = obj["metadata"]
    uid, ns_name, name = meta["uid"], meta["namespace"], meta["name"]
    own_uid = (meta.get("annotations") or {}).get(UID_ANNOTATION)
    if own_uid:
        domain = ComputeDomain.objects.filter(uid=own_uid).first()
        if domain is None:
            return Observed(foreign=True)
        PublishedDomain.objects.update_or_create(domain=domain, defaults={"object_uid": uid})
        return Observed(domain=domain)
    published = PublishedDomain.objects.select_related("domain").filter(object_uid=uid).first()
    if published is not None:
        return Observed(domain=published.domain)
    if not retry_refused:
        refusal = RefusedComputeDomain.objects.filter(object_uid=uid).first()
        if refusal is not None:
            return Observed(refusal=refusal)
    return _adopt(obj, uid, ns_name, name)


def _adopt(obj: dict[str, Any], uid: str, ns_name: str, name: str) -> Observed:
    try:
        with transaction.atomic():
            namespace = Namespace.objects.filter(name=ns_name, active=True).first()
            if namespace is None:
                raise InvalidInput(
                    f"namespace {ns_name} is not a tenant of the portal", field="namespace"
                )
            domain = domain_request(
                actor=KUBERNETES,
                namespace=namespace,
                spec=_spec_of(obj),
                source=DomainSource.KUBERNETES,
            )
            PublishedDomain.objects.create(domain=domain, adopted=True, object_uid=uid)
            RefusedComputeDomain.objects.filter(object_uid=uid).delete()
            log.info("adopted ComputeDomain %s/%s as a request (%s)", ns_name, name, domain.phase)
            return Observed(domain=domain)
    except DomainError as exc:
        reason = "".join(part.title() for part in exc.code.split("_"))
        message = f"{exc.field}: {exc.message}" if exc.field else exc.message
        log.info("refused ComputeDomain %s/%s: %s %s", ns_name, name, reason, message)
        return Observed(refusal=_refuse(uid, ns_name, name, reason, message))


def _refuse(uid: str, ns_name: str, name: str, reason: str, message: str) -> RefusedComputeDomain:
    """Remember the refusal; a new reason or message must be written to the object again."""
    refusal = RefusedComputeDomain.objects.filter(object_uid=uid).first()
    if refusal is None:
        return RefusedComputeDomain.objects.create(
            object_uid=uid, namespace=ns_name, name=name, reason=reason, message=message
        )
    if (refusal.reason, refusal.message) != (reason, message):
        refusal.reason, refusal.message, refusal.reported = reason, message, False
        refusal.save(update_fields=["reason", "message", "reported", "updated_at"])
    return refusal


def _spec_of(obj: dict[str, Any]) -> DomainSpec:
    """NVIDIA's spec → the portal's. `numNodes` ≥ 1: the portal places that many trays;
    0 or absent (NVIDIA's default): the domain follows its workload."""
    spec = obj.get("spec") or {}
    channel = spec.get("channel") or {}
    num_nodes = spec.get("numNodes") or 0
    if not isinstance(num_nodes, int) or num_nodes < 0:
        raise InvalidInput(
            "spec.numNodes must be 0 (follow the workload) or the number of trays to place",
            field="spec.numNodes",
        )
    return DomainSpec(
        name=obj["metadata"]["name"],
        num_nodes=num_nodes,
        allocation_mode=channel.get("allocationMode") or "Single",
        resource_claim_template=(channel.get("resourceClaimTemplate") or {}).get("name", ""),
    )


def kube_computedomain_deleted(*, object_uid: str) -> ComputeDomain | None:
    """Deleting the object releases its domain (idempotent: our own removal lands here too)."""
    RefusedComputeDomain.objects.filter(object_uid=object_uid).delete()
    published = PublishedDomain.objects.select_related("domain").filter(object_uid=object_uid)
    row = published.first()
    if row is None or not row.domain.is_live:
        return None
    return domain_release(
        actor=KUBERNETES, domain=row.domain, reason="ComputeDomain deleted in Kubernetes"
    )


def kube_computedomains_resynced(*, present: set[str], listed_at: datetime) -> None:
    """After a full list: objects we knew of that are gone were deleted while unwatched.

    Objects published after the list was taken are not in it yet; they are left alone.
    """
    known = (
        PublishedDomain.objects.exclude(object_uid="")
        .filter(removed=False)
        .filter(Q(published_at__isnull=True) | Q(published_at__lt=listed_at))
    )
    for uid in known.exclude(object_uid__in=present).values_list("object_uid", flat=True):
        kube_computedomain_deleted(object_uid=uid)
    RefusedComputeDomain.objects.filter(created_at__lt=listed_at).exclude(
        object_uid__in=present
    ).delete()
