"""What every pod of a workload run by `tests.support.workloads.Run` is checked for, and
its domains once they run: the pod on one of its domain's trays (as the portal reports
them), its claim allocated and prepared there, its CDI devices resolving there to its own
clique's channel, the tray's IMEX daemon listing only its own clique's members; the domain
Ready in the portal and on its object, with the annotations NVIDIA's CRD has no field for.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from domains.computedomains.models import AllocationMode, ComputeDomain, DomainMember, Phase
from domains.computedomains.selectors import domain_channels
from domains.kube.crd import MESSAGE_ANNOTATION, RACKS_ANNOTATION
from domains.kube.dra import DOMAIN_UID_LABEL
from nodeagent.config import CHANNELS_DIR, Paths
from nodeagent.dra import CDI_CLAIM_KIND, DRIVER_NAME
from nodeagent.imex.files import UNUSED_SLOT_IP
from testbed.agents import AgentFleet
from testbed.kube.cluster import ClusterKube, wait_for
from testbed.kube.objects import claim_of
from tests.support.cdi import resolve


def domain_of(pod: dict[str, Any], domains: dict[str, ComputeDomain]) -> ComputeDomain:
    """The domain whose claim template the pod names (one per pod in these workloads)."""
    names = [c.get("resourceClaimTemplateName") for c in pod["spec"].get("resourceClaims") or []]
    (domain,) = [domains[name] for name in names if name in domains]
    return domain


def members_of(domain: ComputeDomain) -> set[str]:
    return set(domain.members.filter(active=True).values_list("node__hostname", flat=True))


def ensemble_of(domain: ComputeDomain, host: str) -> list[DomainMember]:
    """The members of the IMEX ensemble the tray is in: its clique's, in index order."""
    member = domain.members.get(active=True, node__hostname=host)
    return list(domain.members.filter(active=True, clique=member.clique_id).order_by("index"))


def peers_on_tray(fleet: AgentFleet, host: str) -> dict[int, str]:
    """Index → IP of every peer the tray's IMEX daemon reaches: its nodes file's lines, and
    for a domain that follows its workload (a stable name per line), each name as the
    tray's hosts file resolves it (a slot no member holds points nowhere)."""
    hosts = {}
    hosts_file = Paths(fleet.tray_root(host)).hosts
    for line in hosts_file.read_text().splitlines() if hosts_file.exists() else ():
        if line and not line.startswith("#"):
            ip, *names = line.split()
            hosts.update(dict.fromkeys(names, ip))
    lines = (fleet.nodes_file(host) or "").split()
    resolved = {i: hosts.get(line, line) for i, line in enumerate(lines)}
    return {i: ip for i, ip in resolved.items() if ip != UNUSED_SLOT_IP}


def check_nodes_file(fleet: AgentFleet, host: str, domain: ComputeDomain) -> None:
    """The tray's IMEX daemon lists its own clique's members, none of another clique."""
    expected = {m.index: m.ip_address for m in ensemble_of(domain, host)}
    # A domain that follows its workload grows its ensemble pod by pod: the first trays'
    # hosts files catch up with the last join.
    try:
        wait_for(lambda: peers_on_tray(fleet, host) == expected, 30, f"{host}'s peers")
    except TimeoutError:
        raise AssertionError(f"{host}: {peers_on_tray(fleet, host)} != {expected}") from None


def check_devices(
    fleet: AgentFleet, host: str, domain: ComputeDomain, cdi_ids: list[str], claim_uid: str
) -> None:
    """The container's CDI ids name the claim and resolve on the tray to the domain's
    channel(s): channel0 in Single mode, every channel of the tray in All mode."""
    assert set(cdi_ids) == {f"{CDI_CLAIM_KIND}={claim_uid}"}, cdi_ids
    root = fleet.tray_root(host)
    device = resolve([root / "var/run/cdi", root / "etc/cdi"], cdi_ids[0])
    nodes = device["containerEdits"]["deviceNodes"]
    major = fleet.proc_devices_major(host)
    on_tray = fleet.channel_devices(host)
    assert {(n["type"], n["major"]) for n in nodes} == {("c", major)}
    clique = ensemble_of(domain, host)[0].clique_id
    channels = domain_channels(domain, clique_id=clique)  # its own clique's ensemble's
    if domain.allocation_mode == AllocationMode.SINGLE:
        (node,) = nodes
        assert (node["path"], node["minor"]) == (f"/{CHANNELS_DIR}/channel0", 0)
        (channel,) = channels
        assert on_tray.get(f"channel{channel}") == (major, channel), sorted(on_tray)[:5]
        return
    assert sorted(n["minor"] for n in nodes) == channels == list(range(2048))  # as NVIDIA's
    for n in nodes:
        assert n["path"] == f"/{CHANNELS_DIR}/channel{n['minor']}"
        st = os.lstat(n["hostPath"])
        assert stat.S_ISCHR(st.st_mode)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, n["minor"])
        assert Path(n["hostPath"]).is_relative_to(root)


def check_pod(
    kube: ClusterKube,
    fleet: AgentFleet,
    pod: dict[str, Any],
    domains: dict[str, ComputeDomain],
    prepared: tuple[str, dict[str, list[str]]],
) -> None:
    """Placed by the scheduler alone on one of its domain's trays; its claim allocated and
    prepared there; its containers' CDI ids resolve there to the domain's channels."""
    spec = pod["spec"]
    assert not spec.get("affinity") and not spec.get("nodeSelector"), spec  # none in the file
    assert spec["schedulerName"] == "default-scheduler"
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["PodScheduled"] == "True"
    host = spec["nodeName"]
    domain = domain_of(pod, domains)
    members = members_of(domain)
    assert host in members, f"{pod['metadata']['name']} on {host}, {domain.name} has {members}"
    node, devices = prepared
    assert node == host

    claim = claim_of(kube, pod)
    assert claim is not None
    assert claim["metadata"]["labels"][DOMAIN_UID_LABEL] == str(domain.uid)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER_NAME, host)
    with_claims = [
        c["name"] for c in spec["containers"] if (c.get("resources") or {}).get("claims")
    ]
    assert sorted(devices) == sorted(with_claims)
    for cdi_ids in devices.values():
        check_devices(fleet, host, domain, cdi_ids, claim["metadata"]["uid"])
    check_nodes_file(fleet, host, domain)


def check_ready(kube: ClusterKube, domain: ComputeDomain, hosts: set[str]) -> None:
    """Ready, in the portal and on its object, on its numNodes trays (placed) or on the
    trays its pods run on (one that follows its workload); `hosts`: its pods' trays."""
    # Its claims are prepared once each tray's daemon is ready; the portal's phase follows
    # with the agents' next reports.
    wait_for(
        lambda: ComputeDomain.objects.get(pk=domain.pk).phase == Phase.READY,
        30,
        f"{domain.name} Ready",
    )
    if domain.num_nodes > 0:
        assert len(members_of(domain)) == domain.num_nodes
    else:
        assert members_of(domain) == hosts

    def published_ready() -> dict[str, Any] | None:
        obj = kube.get("computedomains", domain.name, domain.namespace.name) or {}
        status = obj.get("status") or {}
        return status if status.get("status") == "Ready" else None

    status = wait_for(published_ready, 30, f"{domain.name} Ready on its object")
    assert {n["name"] for n in status["nodes"]} == members_of(domain)
    # What NVIDIA's CRD has no field for: the racks its trays are in, the portal's message.
    racks = domain.members.filter(active=True).values_list("node__rack__name", flat=True)
    wanted = {RACKS_ANNOTATION: ",".join(sorted(set(racks)))}

    def annotated() -> dict[str, str] | None:
        obj = kube.get("computedomains", domain.name, domain.namespace.name) or {}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        wanted[MESSAGE_ANNOTATION] = ComputeDomain.objects.get(pk=domain.pk).message
        return annotations if wanted.items() <= annotations.items() else None

    wait_for(annotated, 30, f"{domain.name}'s annotations {wanted}")
