# SPDX-License-Identifier: Apache-2.0
"""`python -m nodeagent --portal URL --join-token T [--root DIR] [--driver-root DIR] ...`"""

from __future__ import annotations

import argparse
import grp
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

from nodeagent.agent import Agent, FatalError
from nodeagent.config import (
    AGENT_VERSION,
    CHANNEL_MODE,
    IMEX_GRACE_TIME_S,
    IMEX_LOG_LEVEL,
    AgentConfig,
    split_command,
)
from nodeagent.health import HealthServer


def octal_mode(value: str) -> int:
    try:
        mode = int(value, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal mode: {value!r}") from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"mode out of range: {value!r}")
    return mode


def group_id(value: str) -> int:
    """A group name (looked up on this host) or a numeric gid."""
    if value.isdigit():
        return int(value)
    try:
        return grp.getgrnam(value).gr_gid
    except KeyError:
        raise argparse.ArgumentTypeError(f"no such group: {value!r}") from None


def log_level(value: str) -> int:
    level = int(value) if value.lstrip("-").isdigit() else -1
    if not 0 <= level <= 4:
        raise argparse.ArgumentTypeError(f"IMEX LOG_LEVEL is 0..4, got {value!r}")
    return level


def grace_time(value: str) -> int:
    seconds = int(value) if value.lstrip("-").isdigit() else -2
    if seconds < -1:
        raise argparse.ArgumentTypeError(f"-1 (wait forever) or seconds >= 0, got {value!r}")
    return seconds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nodeagent", description="Domain Portal node agent")
    _portal_arguments(p)
    _driver_arguments(p)
    _imex_arguments(p)
    _tray_arguments(p)
    _kubernetes_arguments(p)
    _loop_arguments(p)
    return p


def _portal_arguments(p: argparse.ArgumentParser) -> None:
    """The portal and the credential the agent joins with."""
    p.add_argument("--version", action="version", version=f"%(prog)s {AGENT_VERSION}")
    p.add_argument("--portal", required=True, help="Portal base URL, e.g. https://portal:8000")
    p.add_argument(
        "--join-token",
        default=os.environ.get("NODEAGENT_JOIN_TOKEN", ""),
        help="Join token (or NODEAGENT_JOIN_TOKEN); only needed until the node token is saved",
    )
    p.add_argument(
        "--service-account-token-file",
        type=Path,
        default=os.environ.get("NODEAGENT_SERVICE_ACCOUNT_TOKEN_FILE") or None,
        help="Kubernetes: join with this projected service-account token (audience: the "
        "portal's; re-read at every join) instead of a join token",
    )


def _driver_arguments(p: argparse.ArgumentParser) -> None:
    """Where the driver and the IMEX binaries are, and who runs nvidia-imex."""
    p.add_argument(
        "--root", type=Path, default=Path("/"), help="Root for /dev, /proc, /etc/cdi, /var/lib"
    )
    p.add_argument(
        "--driver-root",
        type=Path,
        default=Path("/"),
        help="Where the NVIDIA driver is: libnvidia-ml.so.1 and nvidia-imex(-ctl) come from "
        "here (/ for a host-installed driver; the GPU Operator's /run/nvidia/driver as mounted)",
    )
    p.add_argument("--imex-bin", default="", help="nvidia-imex command (default: the driver's)")
    p.add_argument("--imex-ctl-bin", default="", help="nvidia-imex-ctl (default: the driver's)")
    p.add_argument(
        "--imex-runner",
        action="store_true",
        help="nvidia-imex is run by `python -m nodeagent.runner` (same --root), not by the "
        "agent: required where the agent's restart takes its children with it (a container)",
    )


def _imex_arguments(p: argparse.ArgumentParser) -> None:
    """IMEX's own settings and the channel device nodes."""
    p.add_argument(
        "--imex-grace-time",
        type=grace_time,
        default=IMEX_GRACE_TIME_S,
        help="IMEX_NODE_DISCONNECTED_GRACE_TIME in seconds; -1 (NVIDIA's default) waits forever",
    )
    p.add_argument(
        "--imex-log-level",
        type=log_level,
        default=IMEX_LOG_LEVEL,
        help="IMEX LOG_LEVEL: 0 off, 1 critical, 2 error, 3 warning, 4 info (NVIDIA's default)",
    )
    p.add_argument(
        "--channel-mode",
        type=octal_mode,
        default=CHANNEL_MODE,
        help="Mode of the channel device nodes, on the host and in the CDI spec (default 0666, "
        "as NVIDIA's DRA driver gives them to containers)",
    )
    p.add_argument(
        "--channel-group",
        type=group_id,
        default=None,
        help="Group (name or gid) of the channel device nodes; default root's",
    )


def _tray_arguments(p: argparse.ArgumentParser) -> None:
    """The tray's identity and the agent's health endpoint; the emulator's stand-ins."""
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


def _kubernetes_arguments(p: argparse.ArgumentParser) -> None:
    """Kubernetes: the DRA kubelet plugin."""
    p.add_argument(
        "--kubelet-dir",
        type=Path,
        default=None,
        help="Be the tray's DRA kubelet plugin (Kubernetes): the kubelet's directory, "
        "/var/lib/kubelet (registration socket under plugins_registry/, service under plugins/)",
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="With --kubelet-dir: kubeconfig for the API server (default $KUBECONFIG, else the "
        "pod's service account)",
    )


def _loop_arguments(p: argparse.ArgumentParser) -> None:
    """The loop's cadence and logging."""
    p.add_argument("--poll-interval", type=float, default=5.0, help="Fallback poll (s)")
    p.add_argument("--heartbeat-interval", type=float, default=10.0)
    p.add_argument(
        "--gpu-health-interval",
        type=float,
        default=60.0,
        help="Send the GPUs' temperature, power, XIDs, NVLink and ECC errors this often (s); "
        "0: never",
    )
    p.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))


def config_from(args: argparse.Namespace) -> AgentConfig:
    return AgentConfig(
        portal=args.portal,
        join_token=args.join_token,
        service_account_token_file=args.service_account_token_file,
        root=args.root.resolve(),
        driver_root=args.driver_root,
        imex_bin=split_command(args.imex_bin),
        imex_ctl_bin=split_command(args.imex_ctl_bin),
        imex_runner=args.imex_runner,
        imex_grace_time=args.imex_grace_time,
        imex_log_level=args.imex_log_level,
        channel_mode=args.channel_mode,
        channel_gid=args.channel_group,
        hostname=args.hostname,
        ip=args.ip or route_source_ip(args.portal),
        fabric_facts=args.fabric_facts,
        poll_interval=args.poll_interval,
        heartbeat_interval=args.heartbeat_interval,
        gpu_health_interval=args.gpu_health_interval,
        emulated_channel_files=args.emulated_channel_files,
        kubelet_dir=args.kubelet_dir,
        kubeconfig=args.kubeconfig,
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
