# SPDX-License-Identifier: Apache-2.0
"""`python -m nodeagent --portal URL --join-token T [--root DIR] [--imex-bin P] ...`"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

from nodeagent.agent import Agent, FatalError
from nodeagent.config import AGENT_VERSION, AgentConfig, split_command
from nodeagent.health import HealthServer


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nodeagent", description="Domain Portal node agent")
    p.add_argument("--version", action="version", version=f"%(prog)s {AGENT_VERSION}")
    p.add_argument("--portal", required=True, help="Portal base URL, e.g. https://portal:8000")
    p.add_argument(
        "--join-token",
        default=os.environ.get("NODEAGENT_JOIN_TOKEN", ""),
        help="Join token (or NODEAGENT_JOIN_TOKEN); only needed until the node token is saved",
    )
    p.add_argument("--root", type=Path, default=Path("/"), help="Root for /etc, /dev, /proc")
    p.add_argument("--imex-bin", default="nvidia-imex", help="nvidia-imex command")
    p.add_argument("--imex-ctl-bin", default="nvidia-imex-ctl", help="nvidia-imex-ctl command")
    p.add_argument("--hostname", default="", help="Tray hostname (default: this host's)")
    p.add_argument(
        "--ip",
        default="",
        help="Tray IP its IMEX peers reach it on (default: the source address of its route "
        "to the portal)",
    )
    p.add_argument("--health-addr", default="", help="HOST:PORT for /healthz and /readyz")
    p.add_argument(
        "--fabric-facts",
        type=Path,
        default=None,
        help="Emulator only: read GPU/clique facts from this JSON file instead of NVML",
    )
    p.add_argument(
        "--emulated-channel-files",
        action="store_true",
        help="Emulator only, where mknod is refused: channel 'devices' as regular files",
    )
    p.add_argument("--poll-interval", type=float, default=5.0, help="Fallback poll (s)")
    p.add_argument("--heartbeat-interval", type=float, default=10.0)
    p.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    return p


def config_from(args: argparse.Namespace) -> AgentConfig:
    return AgentConfig(
        portal=args.portal,
        join_token=args.join_token,
        root=args.root.resolve(),
        imex_bin=split_command(args.imex_bin),
        imex_ctl_bin=split_command(args.imex_ctl_bin),
        hostname=args.hostname,
        ip=args.ip or route_source_ip(args.portal),
        fabric_facts=args.fabric_facts,
        poll_interval=args.poll_interval,
        heartbeat_interval=args.heartbeat_interval,
        emulated_channel_files=args.emulated_channel_files,
    )


def route_source_ip(portal: str) -> str:
    """The address this host sends from towards the portal (the usual management network).

    A UDP socket's connect() only asks the kernel for a route: no packet leaves the host.
    """
    host = urlsplit(portal).hostname or ""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, 9, proto=socket.IPPROTO_UDP)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            return str(sock.getsockname()[0])
    except OSError:
        return ""  # registered without one, the tray is never placed: pass --ip


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("websockets").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args.log_level)
    agent = Agent(config_from(args))
    # Handlers only set the stop event; the loop notices at its next wait.
    signal.signal(signal.SIGTERM, lambda *_: agent.request_stop())
    signal.signal(signal.SIGINT, lambda *_: agent.request_stop())
    health = HealthServer(args.health_addr, lambda: [agent.health()]) if args.health_addr else None
    if health:
        health.start()
    try:
        agent.run()
    except FatalError as exc:
        logging.getLogger("nodeagent").error("%s", exc)
        return 2
    finally:
        if health:
            health.stop()
    return 0
