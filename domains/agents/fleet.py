"""The emulator fleet's tray list, from the portal's inventory (demo and tests).

Each tray's emulated NVML facts repeat what the inventory already says (clique, GPU uuids,
driver), so emulated agents register as the trays the fabric was seeded with.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet

from domains.inventory.models import Node


def fleet_spec(nodes: Iterable[Node]) -> dict[str, Any]:
    """`{"trays": [...]}` for `python -m nodeagent.emulator.fleet --spec`."""
    trays = []
    for node in nodes:
        if not node.management_ip:
            continue
        trays.append(
            {
                "hostname": node.hostname,
                "ip": node.management_ip,
                "cluster_uuid": node.clique.cluster_uuid if node.clique else "",
                "clique_id": node.clique.clique_id if node.clique else 0,
                "driver_version": node.driver_version or "580.82.07",
                "gpus": [
                    {
                        "index": gpu.index,
                        "uuid": gpu.uuid,
                        "product": gpu.product,
                        "fabric_state": gpu.fabric_state,
                    }
                    for gpu in node.gpus.all()
                ],
            }
        )
    return {"trays": trays}


def fleet_nodes() -> QuerySet[Node]:
    return Node.objects.filter(gone=False).select_related("clique").prefetch_related("gpus")
