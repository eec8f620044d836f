# SPDX-License-Identifier: Apache-2.0
"""Fail one emulated tray of the demo, and bring it back (the demo and the tests only).

    python -m testbed.emulator.trayctl stop-agent gb-r01-t03    # its agent dies; daemon runs on
    python -m testbed.emulator.trayctl start-agent gb-r01-t03   # a new agent re-adopts it
    python -m testbed.emulator.trayctl stop-daemon gb-r01-t03   # its nvidia-imex killed, held
    python -m testbed.emulator.trayctl start-daemon gb-r01-t03  # its agent starts it again
    python -m testbed.emulator.trayctl kill gb-r01-t03          # both: the tray is dead
    python -m testbed.emulator.trayctl revive gb-r01-t03        # both back
    python -m testbed.emulator.trayctl status                   # every tray's wish

Writes the tray's wish into `<root>/<hostname>/demo-control.json`; the fleet process that
runs the tray's agent (`testbed.emulator.fleet`) follows it within a second, and nothing
else stops: not the other trays, not the web server, worker or beat. `--root` is the
fleet's (`var/agents` for `make demo`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from testbed.emulator.tray import CONTROL_FILE, write_atomic

ACTIONS = {
    "stop-agent": {"agent": "stopped"},
    "start-agent": {"agent": "running"},
    "stop-daemon": {"daemon": "stopped"},
    "start-daemon": {"daemon": "running"},
    "kill": {"agent": "stopped", "daemon": "stopped"},
    "revive": {"agent": "running", "daemon": "running"},
}


def wish_of(root: Path) -> dict[str, str]:
    try:
        wish = json.loads((root / CONTROL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return wish if isinstance(wish, dict) else {}


def control(root: Path, hostname: str, action: str) -> dict[str, str]:
    """Record what `action` asks of the tray; returns its wish now."""
    tray = root / hostname
    if not tray.is_dir():
        raise SystemExit(f"no emulated tray {hostname} under {root} (is --root the fleet's?)")
    wish = {**wish_of(tray), **ACTIONS[action]}
    write_atomic(tray / CONTROL_FILE, json.dumps(wish) + "\n")
    return wish


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="testbed.emulator.trayctl", description=__doc__)
    p.add_argument("--root", type=Path, default=Path("var/agents"), help="The fleet's --root")
    p.add_argument("action", choices=[*ACTIONS, "status"])
    p.add_argument("hostname", nargs="?", default="")
    args = p.parse_args(argv)
    if args.action == "status":
        for tray in sorted(d for d in args.root.iterdir() if (d / "proc").is_dir()):
            wish = wish_of(tray)
            agent, daemon = wish.get("agent", "running"), wish.get("daemon", "running")
            print(f"{tray.name}: agent {agent}, daemon {daemon}")
        return 0
    if not args.hostname:
        p.error(f"{args.action} needs the tray's hostname")
    wish = control(args.root, args.hostname, args.action)
    print(
        f"{args.hostname}: agent {wish.get('agent', 'running')}, "
        f"daemon {wish.get('daemon', 'running')} (the fleet follows within a second)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
