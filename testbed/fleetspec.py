"""The emulator fleet's tray list, from the portal's inventory (demo and tests).

    python -m testbed.fleetspec --out var/agents/fleet.json [--rack r1 ...]

Each tray's emulated NVML facts repeat what the inventory already says (clique, GPU uuids,
driver), so emulated agents register as the trays the fabric was seeded with.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from domains.inventory.models import Node


def fleet_spec(nodes: Iterable[Node]) -> dict[str, Any]:
    """`{"trays": [...]}` for `python -m testbed.emulator.fleet --spec`."""
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
    from domains.inventory.models import Node

    return Node.objects.filter(gone=False).select_related("clique").prefetch_related("gpus")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the tray list for the emulated fleet.")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rack", action="append", default=None, help="Only these racks")
    opts = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    nodes = fleet_nodes()
    if opts.rack:
        nodes = nodes.filter(rack__name__in=opts.rack)
    spec = fleet_spec(nodes)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    print(f"{len(spec['trays'])} emulated trays → {opts.out}")


if __name__ == "__main__":
    main()
