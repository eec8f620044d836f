"""A fabric at operator scale for read-path benchmarks: 100 racks, 1,800 trays, 7,200 GPUs,
500 live domains spread over 20 tenant namespaces (or 1,000 racks and 5,000 domains).

Built with bulk inserts (this is fixture data; the benchmarks measure the read paths that
render it). Domains are packed clique by clique, each in one clique like the controller
places them, with a channel from the ledger and members marked Ready.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

NAMESPACES = 20
SIZES = (1, 2, 2, 3, 4, 4, 8)  # trays per domain: mostly small, as tenants ask


@dataclass
class ScaleFabric:
    racks: int
    trays: int
    gpus: int
    live_domains: int
    namespaces: list[str]


def build_scale_fabric(*, racks: int = 100, live_domains: int = 500, seed: int = 7) -> ScaleFabric:
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from domains.computedomains.models import (
        ChannelAllocation,
        ComputeDomain,
        DomainMember,
        MemberState,
        Phase,
    )
    from domains.inventory.models import Gpu, Node, NodeState
    from domains.inventory.seed import RackLayout, build_fabric
    from domains.tenancy.models import Membership, Namespace, Quota, Role

    rng = random.Random(seed)
    layouts = [RackLayout((18,)) if i % 2 == 0 else RackLayout((9, 9)) for i in range(racks)]
    with transaction.atomic():
        # Loopback addressing gives 254 racks per /16: past that, more "rows" of racks,
        # each with its own address block and hostname prefix (gb-, gc-, gd-, …).
        for row, start in enumerate(range(0, racks, 250)):
            build_fabric(
                layouts[start : start + 250],
                ip_prefix=f"127.{200 + row}",
                hostname_prefix=f"g{chr(ord('b') + row)}",
                node_state=NodeState.READY,
            )
        now = timezone.now()
        Node.objects.update(last_heartbeat=now, daemon_state="READY")
        users = get_user_model()
        namespaces = []
        for i in range(NAMESPACES):
            ns = Namespace.objects.create(name=f"tenant-{i:02d}")
            Quota.objects.create(namespace=ns, max_gpus=10_000, max_nodes=2_000, max_domains=500)
            user = users.objects.create_user(f"tenant{i:02d}", password="bench")
            Membership.objects.create(user=user, namespace=ns, role=Role.MEMBER)
            namespaces.append(ns)
        users.objects.create_user("ops", password="bench", is_staff=True)

        free: dict[int, list[Node]] = {}
        for node in Node.objects.order_by("clique_id", "slot"):
            free.setdefault(node.clique_id, []).append(node)
        cliques = list(free)
        domains, members, channels = [], [], []
        made = 0
        while made < live_domains:
            size = rng.choice(SIZES)
            fitting = [c for c in cliques if len(free[c]) >= size]
            if not fitting:
                break
            clique = min(fitting, key=lambda c: (len(free[c]), c))  # best fit packs tightly
            picked, free[clique] = free[clique][:size], free[clique][size:]
            ns = namespaces[made % NAMESPACES]
            domain = ComputeDomain(
                namespace=ns,
                name=f"job-{made:04d}",
                num_nodes=size,
                resource_claim_template=f"job-{made:04d}-channel",
                phase=Phase.READY,
                reason="AllMembersReady",
                admitted_at=now,
                placed_at=now,
                ready_at=now,
                lease_expires_at=now + timedelta(hours=24),
            )
            domains.append((domain, clique, picked))
            made += 1
        ComputeDomain.objects.bulk_create([d for d, _, _ in domains])
        next_channel: dict[int, int] = {}
        for domain, clique, picked in domains:
            channel = next_channel.get(clique, 1)
            next_channel[clique] = channel + 1
            channels.append(ChannelAllocation(clique_id=clique, channel=channel, domain=domain))
            for index, node in enumerate(picked):
                members.append(
                    DomainMember(
                        domain=domain,
                        node=node,
                        index=index,
                        clique_id=clique,
                        ip_address=node.management_ip,
                        state=MemberState.READY,
                        daemon_state="READY",
                        ready_at=now,
                    )
                )
        DomainMember.objects.bulk_create(members, batch_size=2000)
        ChannelAllocation.objects.bulk_create(channels, batch_size=2000)
    return ScaleFabric(
        racks=racks,
        trays=Node.objects.count(),
        gpus=Gpu.objects.count(),
        live_domains=made,
        namespaces=[ns.name for ns in namespaces],
    )
