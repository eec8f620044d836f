"""A tray's identity is the operator's: its management IP, NVLink clique, GPU set and rack.

Peers are told to connect to a tray's management IP, placement trusts its clique for NVLink
reachability and its GPUs for capacity. A tray's own word (its agent's facts or join, under
the fleet's join token or its node token) or its Kubernetes Node's labels, which the node
itself can write, may not change them: a compromised tray would put itself into another
rack's clique, or make its peers connect to the cloud's metadata address.

So a change reported by anyone but an operator is *held*: the record keeps the identity the
operator accepted, the tray waits for acceptance (state `pending`, as a tray the inventory
did not know: out of placement) and `Node.identity_hold` keeps what was reported, the old
and the new values, for the tray page and the API. An operator accepts it (`node_accept`,
which applies the new values and gives the tray back the state it had) or marks the tray
down. A change reported while the tray is down is held too and compared when an operator
marks it up: mark-up then leaves it waiting for acceptance.

Management IPs that no tray can have (link-local, loopback outside the networks an
operator allows — the emulator's trays live on 127.0.0.0/8 —, multicast, unspecified,
reserved, and the portal's own addresses) are refused before anything else, naming `ip`.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import socket
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from domains.audit.events import Actor, record_event
from domains.errors import InvalidInput
from domains.inventory.models import Clique, Gpu, Node, NodeState, Rack

# What a hold records per field: {"from": shown, "to": shown}; `proposed` keeps the values
# to apply (the full GPU facts, the clique as (cluster_uuid, clique_id)).
FIELDS = ("ip", "clique", "gpus", "rack")
_WORDS = {"ip": "management IP", "clique": "clique", "gpus": "GPUs", "rack": "rack"}
# How many GPU UUIDs a hold shows per side (64 made-up GPUs need not fill the page).
_SHOWN_GPUS = 8


# --- management IPs ------------------------------------------------------------------------


@functools.cache
def _allowed_nets() -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(
        ipaddress.ip_network(net, strict=False) for net in settings.PORTAL["TRAY_ALLOWED_NETS"]
    )


@functools.cache
def portal_addresses() -> frozenset[str]:
    """The addresses the portal itself answers on or depends on, as far as it can tell: the
    loopback it binds to, this host's addresses, the IP literals in ALLOWED_HOSTS and those
    of its database and Redis, and PORTAL_OWN_ADDRESSES."""
    found = {"127.0.0.1", "::1"}
    names = [h.strip("[]") for h in settings.ALLOWED_HOSTS]
    names.append(str(settings.DATABASES["default"].get("HOST") or ""))
    names += list(settings.PORTAL["OWN_ADDRESSES"])
    with contextlib.suppress(OSError):
        found.update(socket.gethostbyname_ex(socket.gethostname())[2])
    for name in names:
        try:
            found.add(str(ipaddress.ip_address(name)))
        except ValueError:
            continue
    return frozenset(found)


def management_ip_refusal(ip: str) -> str:
    """Why no tray may have `ip` as its management IP ("" when it may)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return f"{ip!r} is not an IP address"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if str(address) in portal_addresses():
        return f"{address} is one of the portal's own addresses"
    if any(address in net for net in _allowed_nets()):
        return ""
    for test, words in (
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address (169.254.0.0/16, fe80::/10)"),
        (address.is_multicast, "a multicast address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_reserved, "a reserved address"),
    ):
        if test:
            return f"{address} is {words}, which no tray's peers can reach it at"
    return ""


# --- the record and what was reported ------------------------------------------------------


def identity_of(node: Node) -> dict[str, Any]:
    """The tray's identity as the record has it, in the form a hold shows."""
    return {
        "ip": node.management_ip or "",
        "clique": node.clique.label if node.clique_id and node.clique else "",
        "gpus": sorted(node.gpus.values_list("uuid", flat=True)),
        "rack": node.rack.name if node.rack_id and node.rack else "",
    }


def _shown(field: str, value: Any) -> Any:
    if field == "gpus":
        uuids = sorted(g["uuid"] if isinstance(g, dict) else g for g in value)
        more = len(uuids) - _SHOWN_GPUS
        return uuids[:_SHOWN_GPUS] + ([f"… {more} more"] if more > 0 else [])
    return value


def _differs(node: Node, field: str, record: Any, value: Any) -> bool:
    if field == "gpus":
        # A tray with no GPUs on record (never probed) takes its first set.
        return bool(record) and sorted(g["uuid"] for g in value) != record
    if field == "clique" and not record:
        # A tray of no clique whose fabric registration completes joins its clique, unless
        # that clique is another rack's: only an operator moves a tray between racks.
        cluster_uuid, _, number = str(value).rpartition(".")
        clique = Clique.objects.filter(
            cluster_uuid=cluster_uuid, clique_id=int(number or 0)
        ).first()
        return (
            clique is not None
            and None not in (clique.rack_id, node.rack_id)
            and (clique.rack_id != node.rack_id)
        )
    if field in ("ip", "rack") and not record:
        return False  # the first address (or rack) a tray is known by is no change
    return bool(value != record)


def settled(node: Node) -> bool:
    """Whether the tray has an identity an operator accepted (or seeded): every tray but one
    that joined unknown and was never accepted, whose facts are taken as they come."""
    return not (node.state == NodeState.PENDING and not node.identity_hold)


def held_fields(node: Node, reported: dict[str, Any]) -> set[str]:
    """The fields of `reported` ({field: value}, only what the reporter states) that differ
    from the record: what `identity_hold` keeps and the caller must not apply."""
    record = identity_of(node)
    return {f for f in FIELDS if f in reported and _differs(node, f, record[f], reported[f])}


@transaction.atomic
def identity_hold(*, node: Node, actor: Actor, reported: dict[str, Any]) -> set[str]:
    """Hold the changes `reported` would make to the tray's identity (see the module); returns
    the fields held, which the caller leaves as they are. `node` is locked by the caller.

    Each report replaces the held values of the fields it states with the latest ones (a
    tray that reports its accepted identity again holds nothing, and still waits for the
    operator); fields it leaves out stay held as they were."""
    hold = dict(node.identity_hold or {})
    if not settled(node) or not (hold or held_fields(node, reported)):
        return set()
    record = identity_of(node)
    changes, proposed = dict(hold.get("changes", {})), dict(hold.get("proposed", {}))
    for field in (f for f in FIELDS if f in reported):
        value = reported[field]
        if _differs(node, field, record[field], value):
            changes[field] = {"from": _shown(field, record[field]), "to": _shown(field, value)}
            proposed[field] = value
        else:
            changes.pop(field, None)
            proposed.pop(field, None)
    fresh = hold.get("changes") != changes
    hold.update(
        changes=changes,
        proposed=proposed,
        by=actor.name if fresh else hold.get("by", actor.name),
        since=hold.get("since") or timezone.now().isoformat(),
    )
    if node.state not in (NodeState.PENDING, NodeState.DOWN):
        hold.update(state_before=node.state, reason_before=node.state_reason)
        node.state = NodeState.PENDING
    node.state_reason = _reason(node, changes)
    node.identity_hold = hold
    node.save(update_fields=["identity_hold", "state", "state_reason", "updated_at"])
    if fresh:
        record_event(
            actor=actor,
            verb="node.identity_held",
            obj=node,
            message=node.state_reason,
            details=changes,
        )
    return set(proposed)


def _reason(node: Node, changes: dict[str, dict[str, Any]]) -> str:
    said = "; ".join(
        f"{_WORDS[f]} {_plain(c['from'])} → {_plain(c['to'])}" for f, c in changes.items()
    )
    said = f"a new identity ({said})" if said else "its accepted identity again"
    wait = "once marked up, waits" if node.state == NodeState.DOWN else "waits"
    return f"reported {said}: {wait} for an operator to accept it"[:300]


def _plain(value: Any) -> str:
    if isinstance(value, list):
        return f"{len(value)} GPU{'s' if len(value) != 1 else ''}" if value else "none"
    return str(value or "none")


# --- an operator accepts ----------------------------------------------------------------


def identity_apply(node: Node) -> str:
    """Apply the held identity to `node` (locked, saved by the caller) and clear the hold;
    returns the state the tray goes back to. Refused naming the field when the new values
    clash with another tray's."""
    hold = node.identity_hold or {}
    proposed = hold.get("proposed", {})
    if proposed.get("ip"):
        taken = Node.objects.filter(management_ip=proposed["ip"]).exclude(pk=node.pk)
        if taken.exists():
            raise InvalidInput(f"IP {proposed['ip']} belongs to another tray", field="ip")
        node.management_ip = proposed["ip"]
    if "rack" in proposed:
        node.rack = Rack.objects.get_or_create(name=proposed["rack"][:63])[0]
    if "clique" in proposed:
        node.clique = clique_for(proposed["clique"], rack=node.rack)
    if "gpus" in proposed:
        uuids = [g["uuid"] for g in proposed["gpus"]]
        if Gpu.objects.filter(uuid__in=uuids).exclude(node=node).exists():
            raise InvalidInput("a GPU it reported belongs to another tray", field="gpus")
        gpus_sync(node, proposed["gpus"])
        node.gpu_count = len(proposed["gpus"])
    node.identity_hold = {}
    back = hold.get("state_before", NodeState.UNKNOWN)
    node.state_reason = hold.get("reason_before", "") if back != NodeState.UNKNOWN else ""
    return str(back)


def clique_for(label: str, *, rack: Rack | None) -> Clique | None:
    """The clique of a `<cluster_uuid>.<clique_id>` label (made, in `rack`, if new)."""
    if not label:
        return None
    cluster_uuid, _, number = label.rpartition(".")
    clique, _ = Clique.objects.get_or_create(
        cluster_uuid=cluster_uuid, clique_id=int(number), defaults={"rack": rack}
    )
    return clique


def gpus_sync(node: Node, gpus: list[Any]) -> None:
    """Make the tray's GPU rows those of `gpus` (the agent's GPU facts); none: no change."""
    if not gpus:
        return
    current = {g.index: g for g in node.gpus.all()}
    Gpu.objects.filter(node=node).exclude(index__in=[g["index"] for g in gpus]).delete()
    for fact in gpus:
        gpu = current.get(fact["index"])
        vbios = fact.get("vbios_version", "")  # an older agent does not send it
        if gpu and (gpu.uuid, gpu.product, gpu.fabric_state, gpu.vbios_version) == (
            fact["uuid"],
            fact["product"] or gpu.product,
            fact["fabric_state"],
            vbios or gpu.vbios_version,
        ):
            continue
        Gpu.objects.update_or_create(
            node=node,
            index=fact["index"],
            defaults={
                "uuid": fact["uuid"],
                "product": fact["product"],
                "fabric_state": fact["fabric_state"],
                **({"vbios_version": vbios} if vbios else {}),
            },
        )
