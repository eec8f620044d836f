"""Building a realistic fabric: GB200 NVL72 racks, partitioned into cliques.

Used by the `seed_demo` command, the tests and the benchmarks.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from domains.inventory.models import (
    Clique,
    FabricState,
    Gpu,
    Node,
    NodeSource,
    NodeState,
    PowerShelf,
    Rack,
    SwitchTray,
)

GB200_PRODUCT = "NVIDIA GB200"
TRAYS_PER_RACK = 18
GPUS_PER_TRAY = 4
SWITCH_TRAYS = 9
# NVIDIA's GB200 reference rack: eight power shelves of six 5.5 kW PSUs each.
POWER_SHELVES = 8
PSUS_PER_SHELF = 6
PSU_WATTS = 5500
DRIVER_VERSION = "580.82.07"
_SEED_NS = uuid.UUID("6f1c9b52-8f0e-4c1e-9a51-2d3b1f0c7a10")


@dataclass(frozen=True)
class RackLayout:
    """How one rack is partitioned: clique sizes in tray order, e.g. (18,) or (9, 9)."""

    cliques: tuple[int, ...] = (TRAYS_PER_RACK,)

    @classmethod
    def parse(cls, text: str) -> RackLayout:
        """`"18"`, `"9,9"` or `"6+6+6"` → clique sizes; they must add up to 18 or fewer."""
        parts = [p for p in text.replace("+", ",").split(",") if p.strip()]
        try:
            sizes = tuple(int(p) for p in parts)
        except ValueError as exc:
            raise ValueError(f"layout {text!r}: clique sizes must be integers") from exc
        if not sizes or any(s < 1 for s in sizes) or sum(sizes) > TRAYS_PER_RACK:
            raise ValueError(f"layout {text!r}: sizes must be ≥ 1 and add up to at most 18")
        return cls(cliques=sizes)


DEFAULT_LAYOUTS = (RackLayout((18,)), RackLayout((9, 9)))


def tray_ip(ip_prefix: str, rack_number: int, slot: int) -> str:
    """Each tray gets its own loopback management IP: `<prefix>.<rack>.<slot>`."""
    return f"{ip_prefix}.{rack_number}.{slot}"


@transaction.atomic
def build_fabric(
    layouts: Sequence[RackLayout] = DEFAULT_LAYOUTS,
    *,
    ip_prefix: str = "127.0",
    hostname_prefix: str = "gb",
    node_state: str = NodeState.UNKNOWN,
    first_rack: int = 1,
) -> list[Rack]:
    """Create racks, cliques, trays and GPUs. Racks that exist already are left alone."""
    if len(layouts) + first_rack - 1 > 254:
        raise ValueError("at most 254 racks fit the loopback addressing scheme")
    racks: list[Rack] = []
    for offset, layout in enumerate(layouts):
        number = first_rack + offset
        name = f"{hostname_prefix}-r{number:02d}"
        rack, created = Rack.objects.get_or_create(
            name=name,
            defaults={
                "location": f"hall A, row {1 + (number - 1) // 10}, position {number}",
                "position": number,
                "compute_slots": TRAYS_PER_RACK,
                "switch_slots": SWITCH_TRAYS,
            },
        )
        racks.append(rack)
        if created:
            _build_rack(rack, number, layout, ip_prefix, hostname_prefix, node_state)
    return racks


def _build_rack(
    rack: Rack,
    number: int,
    layout: RackLayout,
    ip_prefix: str,
    hostname_prefix: str,
    node_state: str,
) -> None:
    cluster_uuid = str(uuid.uuid5(_SEED_NS, f"{hostname_prefix}-cluster-{number}"))
    cliques = [
        Clique.objects.create(
            cluster_uuid=cluster_uuid,
            clique_id=i,
            rack=rack,
            name=f"{rack.name}-c{i}",
        )
        for i in range(len(layout.cliques))
    ]
    nodes: list[Node] = []
    slot = 0
    for clique, size in zip(cliques, layout.cliques, strict=True):
        for _ in range(size):
            slot += 1
            nodes.append(
                Node(
                    hostname=f"{rack.name}-t{slot:02d}",
                    management_ip=tray_ip(ip_prefix, number, slot),
                    rack=rack,
                    slot=slot,
                    clique=clique,
                    gpu_count=GPUS_PER_TRAY,
                    gpu_product=GB200_PRODUCT,
                    driver_version=DRIVER_VERSION,
                    state=node_state,
                    source=NodeSource.SEED,
                )
            )
    Node.objects.bulk_create(nodes)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    Gpu.objects.bulk_create(
        Gpu(
            node=node,
            index=i,
            uuid=f"GPU-{uuid.uuid5(_SEED_NS, f'{node.hostname}-gpu{i}')}",
            product=GB200_PRODUCT,
            fabric_state=FabricState.COMPLETED,
        )
        for node in nodes
        for i in range(GPUS_PER_TRAY)
    )
    build_rack_parts(rack)


def build_rack_parts(rack: Rack) -> None:
    """The rack's NVLink switch trays and power shelves, as a GB200 NVL72 has them."""
    SwitchTray.objects.bulk_create(
        SwitchTray(rack=rack, slot=slot, name=f"{rack.name}-s{slot:02d}")
        for slot in range(1, rack.switch_slots + 1)
    )
    PowerShelf.objects.bulk_create(
        PowerShelf(
            rack=rack,
            position=position,
            name=f"{rack.name}-p{position}",
            psu_count=PSUS_PER_SHELF,
            psu_watts=PSU_WATTS,
        )
        for position in range(1, POWER_SHELVES + 1)
    )
