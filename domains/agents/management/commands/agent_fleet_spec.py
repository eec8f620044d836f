"""`manage.py agent_fleet_spec --out var/agents/fleet.json`: the demo's emulated trays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from domains.agents.fleet import fleet_nodes, fleet_spec


class Command(BaseCommand):
    help = "Write the tray list for `python -m nodeagent.emulator.fleet --spec`."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--rack", action="append", default=None, help="Only these racks")

    def handle(self, *args: Any, **opts: Any) -> None:
        nodes = fleet_nodes()
        if opts["rack"]:
            nodes = nodes.filter(rack__name__in=opts["rack"])
        spec = fleet_spec(nodes)
        out: Path = opts["out"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
        self.stdout.write(f"{len(spec['trays'])} emulated trays → {out}")
