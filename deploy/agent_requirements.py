# SPDX-License-Identifier: Apache-2.0
"""The node agent's part of the lock: the entries of requirements/main.txt it needs, hashes,
markers and all, so that the agent image installs exactly the portal's pins with
`pip install --require-hashes` and nothing of Django, Celery or Channels.

    python deploy/agent_requirements.py requirements/main.txt > agent.txt

uv writes, under each pinned package, the packages that pulled it in (`# via`). The agent's
set is its own direct dependencies (AGENT) and, repeatedly, every pin pulled in by one
already in the set. Standard library only: it runs in the image's build stage.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# What nodeagent/ imports beside the standard library and domain_portal (its version):
# tests/kube/test_agent_image.py checks this against the agent's actual imports.
AGENT = frozenset(
    {
        "httpx",
        "websockets",
        "nvidia-ml-py",
        "jsonschema",
        "grpcio",
        "protobuf",
        "kubernetes",
        "urllib3",  # the DRA plugin's Kubernetes calls use it directly
        "prometheus-client",  # the agent's /metrics (nodeagent/metrics.py); no dependencies
    }
)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")
_VIA = re.compile(r"^#\s+(?:via\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)(?:\s|$)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Pin:
    name: str
    lines: list[str] = field(default_factory=list)
    via: set[str] = field(default_factory=set)


def parse(text: str) -> list[Pin]:
    pins: list[Pin] = []
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            pins.append(Pin(canonical(match.group(1)), [line]))
        elif pins and line.startswith("    --hash"):
            pins[-1].lines.append(line)
        elif pins and line.strip().startswith("#"):
            via = _VIA.match(line.strip())
            if via and via.group(1) != "via":
                pins[-1].via.add(canonical(via.group(1)))
    return pins


def agent_pins(pins: list[Pin]) -> list[Pin]:
    """AGENT and every pin pulled in, directly or not, by one of them."""
    known = {pin.name for pin in pins}
    missing = AGENT - known
    if missing:
        raise SystemExit(f"not in the lock: {', '.join(sorted(missing))}")
    chosen = set(AGENT)
    grew = True
    while grew:
        grew = False
        for pin in pins:
            if pin.name not in chosen and pin.via & chosen:
                chosen.add(pin.name)
                grew = True
    return [pin for pin in pins if pin.name in chosen]


def render(pins: list[Pin]) -> str:
    head = "# The node agent's part of requirements/main.txt (deploy/agent_requirements.py)\n"
    return head + "".join("\n".join(pin.lines) + "\n" for pin in pins)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(render(agent_pins(parse(Path(argv[1]).read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
