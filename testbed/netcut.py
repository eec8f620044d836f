"""Cutting the network between node agents and the portal, for real, without closing
anything: the agents (and the emulated IMEX daemons they start) run in a network namespace
of their own, joined to the host by a veth pair; the portal listens on the host end. A cut
takes the host end's link down: packets either way are dropped (no RST, no FIN, sockets stay
open on both sides, as when a cable or a switch port dies); healing brings it back up.

Addresses are link-local (169.254.0.0/16, never routed beyond the link), a /30 per pair,
picked free; the tray addresses (127.x) live on the namespace's own loopback, so the trays'
IMEX daemons still reach each other during a cut: only agent ↔ portal traffic is lost.

Needs root (CAP_NET_ADMIN) and iproute2's `ip netns`; `NetnsLink.available()` says whether
this machine allows it, so a test can skip with the reason where it does not.

    with NetnsLink() as link:
        server, url = start_server(host=link.host_ip)
        fleet = AgentFleet(url, nodes, wrap=link.wrap)
        link.cut(); ...; link.heal()
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import uuid
from typing import Any


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


class NetnsLink:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ns = f"dp-{tag}"
        self.host_if = f"dph{tag}"  # interface names: at most 15 characters
        self.ns_if = f"dpn{tag}"
        self.host_ip, self.ns_ip = self._free_pair()
        self.is_cut = False

    @staticmethod
    def available() -> str:
        """'' when namespaces and veth pairs can be made here, else why not."""
        if shutil.which("ip") is None:
            return "iproute2's `ip` is not installed"
        if os.geteuid() != 0:
            return "making a network namespace needs root"
        probe = f"dp-probe-{uuid.uuid4().hex[:6]}"
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"`ip netns add` failed: {made.stderr.strip()}"
        _ip("netns", "del", probe, check=False)
        return ""

    @staticmethod
    def _free_pair() -> tuple[str, str]:
        used = _ip("-o", "-4", "addr", "show").stdout
        for _ in range(100):
            a, b = random.randrange(1, 255), random.randrange(0, 64) * 4
            host, peer = f"169.254.{a}.{b + 1}", f"169.254.{a}.{b + 2}"
            if f"169.254.{a}.{b}" not in used and host not in used and peer not in used:
                return host, peer
        raise RuntimeError("no free link-local /30 found")

    @property
    def wrap(self) -> list[str]:
        """The argv prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.ns]

    def up(self) -> None:
        _ip("netns", "add", self.ns)
        _ip("-n", self.ns, "link", "set", "lo", "up")
        _ip(
            "link",
            "add",
            self.host_if,
            "type",
            "veth",
            "peer",
            "name",
            self.ns_if,
            "netns",
            self.ns,
        )
        _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        _ip("-n", self.ns, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        _ip("link", "set", self.host_if, "up")
        _ip("-n", self.ns, "link", "set", self.ns_if, "up")
        # Permanent neighbour entries both ways: during a cut ARP would fail after a few
        # seconds and turn the silence into "No route to host" at once; a dead switch port
        # (or a router hop away) only ever times out.
        host_mac = self._mac(self.host_if)
        ns_mac = self._mac(self.ns_if, self.ns)
        _ip(
            "-n",
            self.ns,
            "neigh",
            "replace",
            self.host_ip,
            "lladdr",
            host_mac,
            "dev",
            self.ns_if,
            "nud",
            "permanent",
        )
        _ip(
            "neigh",
            "replace",
            self.ns_ip,
            "lladdr",
            ns_mac,
            "dev",
            self.host_if,
            "nud",
            "permanent",
        )

    @staticmethod
    def _mac(interface: str, ns: str | None = None) -> str:
        where = ["-n", ns] if ns else []
        out = _ip(*where, "-o", "link", "show", interface).stdout
        return out.split("link/ether", 1)[1].split()[0]

    def cut(self) -> None:
        """Drop everything between the namespace and the host, closing nothing."""
        _ip("link", "set", self.host_if, "down")
        self.is_cut = True

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")
        # a link going down flushes its neighbour table: put the host side's entry back
        _ip(
            "neigh",
            "replace",
            self.ns_ip,
            "lladdr",
            self._mac(self.ns_if, self.ns),
            "dev",
            self.host_if,
            "nud",
            "permanent",
        )
        self.is_cut = False

    def down(self) -> None:
        with contextlib.suppress(Exception):
            _ip("link", "del", self.host_if, check=False)
        with contextlib.suppress(Exception):
            _ip("netns", "del", self.ns, check=False)

    def __enter__(self) -> NetnsLink:
        self.up()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.down()
