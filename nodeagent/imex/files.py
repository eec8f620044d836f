# SPDX-License-Identifier: Apache-2.0
"""The files `nvidia-imex` reads: its config, its nodes file, the peers' hosts block.

The daemon reads its config and nodes file only at start (`write_config` says when a running
one must restart to follow them); the names of a domain that follows its workload are
resolved through the hosts file, again on SIGUSR1.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nodeagent.config import IMEX_GRACE_TIME_S, IMEX_LOG_LEVEL, Paths
from nodeagent.files import remove, write_atomic, write_in_place


def render_config(
    *,
    paths: Paths,
    bind_ip: str,
    server_port: int,
    cmd_port: int,
    grace_time: int = IMEX_GRACE_TIME_S,
    log_level: int = IMEX_LOG_LEVEL,
) -> str:
    """The daemon's config: foreground, command port on, our nodes file, this tray's IP.

    `grace_time` (IMEX_NODE_DISCONNECTED_GRACE_TIME): how long a disconnected peer may stay
    away before what it shared is cleaned up; NVIDIA's -1 waits forever, so a network blip
    never breaks a running job. `log_level`: 0 (off) to 4 (info, NVIDIA's default).
    """
    lines = [
        "# Written by the Domain Portal node agent, which owns this daemon.",
        "DAEMONIZE=0",
        f"SERVER_PORT={server_port}",
        f"BIND_INTERFACE_IP={bind_ip}",
        "IMEX_CMD_ENABLED=1",
        f"IMEX_CMD_PORT={cmd_port}",
        f"IMEX_CMD_BIND_INTERFACE_IP={bind_ip}",
        f"IMEX_NODE_CONFIG_FILE={paths.nodes_file}",
        "IMEX_WAIT_FOR_QUORUM=RECOVERY",
        f"IMEX_NODE_DISCONNECTED_GRACE_TIME={grace_time}",
        "IMEX_ENABLE_AUTH_ENCRYPTION=0",
        f"LOG_LEVEL={log_level}",
        "LOG_FILE_NAME=",
    ]
    return "\n".join(lines) + "\n"


def render_nodes(peer_ips: list[str]) -> str:
    """One IP per line; the line number is the node's index, identical on every member."""
    return "".join(f"{ip}\n" for ip in peer_ips)


# --- stable names: a domain that follows its workload -----------------------------------------
# NVIDIA's way to change IMEX membership without restarting anyone: the nodes file lists one
# stable name per slot, identical on every member and never changed while the domain lives;
# each tray maps the names of the current members to their IPs in its hosts file, and
# SIGUSR1 makes the daemon re-resolve them (at most once every 5 s).
#
# The list is fixed, as NVIDIA's driver writes it: MAX_NODES names (its
# maxNodesPerIMEXDomain, 18 by default: one NVL72 rack), whatever the clique's size. A list
# that followed the number of trays in the clique changed on every member, and restarted
# every member's daemon, whenever a tray was added to the clique or relabelled. The names
# are the portal's own (NVIDIA's are `compute-domain-daemon-<token>-%04d`, and NVIDIA's
# daemon drops every hosts line that names one), so the two drivers never edit each
# other's lines.
#
# Two things NVIDIA learnt in the field, done here too:
# - Every name of the list is in the hosts file: a slot no member holds maps to
#   UNUSED_SLOT_IP (nobody listens there). A name left out falls through to DNS, and the
#   daemon asks for it again and again (with Kubernetes' default `ndots:5`, once per search
#   domain each time): NVIDIA's users saw IMEX flood CoreDNS.
# - The names carry a token of the domain (`portal-imex-<token>-<i>`, the desired state's
#   `names`): IMEX takes two daemons whose nodes files list the same names as one domain,
#   so with names shared by every domain, a daemon still holding a tray's old address after
#   that tray moved to another domain saw an identical list and spoke to it (NVIDIA saw
#   cross-domain IMEX connections after address reuse). A domain formed before the names
#   carried a token keeps the names it started with (`portal-imex-<i>`): its running
#   daemons read their nodes file only at start.
MAX_NODES = 18
UNUSED_SLOT_IP = "127.0.0.2"  # NVIDIA's sentinel
# The oldest driver whose nvidia-imex takes names in its nodes file and re-resolves them on
# SIGUSR1: NVIDIA's driver refuses to run its DNS-name mode on anything older.
NAMES_MIN_DRIVER = "570.158.01"
SLOT_PREFIX = "portal-imex-"
# Written by the daemon's parent: the IMEX runner, or the agent where it runs the daemon
# itself. A block an older agent marked "(written by the node agent)" is ours too.
HOSTS_BEGIN = "# BEGIN domain-portal IMEX peers"
HOSTS_END = "# END domain-portal IMEX peers"


def slot_name(index: int, token: str = "") -> str:
    return f"{SLOT_PREFIX}{token}-{index}" if token else f"{SLOT_PREFIX}{index}"


def names_unsupported(driver_version: str) -> str:
    """Why this driver's nvidia-imex cannot serve a domain that follows its workload, or ""
    (also when the version is unknown: the daemon's own start then says what is wrong)."""
    have, need = _version(driver_version), _version(NAMES_MIN_DRIVER)
    if not have or have >= need:
        return ""
    return (
        f"a domain that follows its workload needs NVIDIA driver {NAMES_MIN_DRIVER} or newer "
        f"(nvidia-imex with peer names and SIGUSR1); this tray runs {driver_version}: update "
        "its driver, or give the domain a fixed number of trays (numNodes)"
    )


def _version(text: str) -> tuple[int, ...]:
    """`570.158.01` → (570, 158, 1); () when it is not a dotted number."""
    parts = text.strip().split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def render_names(token: str = "") -> str:
    """The nodes file of a domain that follows its workload: MAX_NODES names, always."""
    return "".join(f"{slot_name(i, token)}\n" for i in range(MAX_NODES))


def peer_hosts(peers: Mapping[int, str], token: str = "") -> dict[str, str]:
    """Every name of the nodes file → the IP of the member in that slot, or UNUSED_SLOT_IP
    for a slot no member holds (`peers`: slot → IP)."""
    return {slot_name(i, token): peers.get(i, UNUSED_SLOT_IP) for i in range(MAX_NODES)}


def legacy_peers(hosts: Mapping[str, str]) -> dict[int, str]:
    """The members (slot → IP) of a block of names without a token (an IMEX runner from
    before tokens and sentinels writes its block from these); {} for names with one."""
    found = {}
    for name, ip in hosts.items():
        slot = name.removeprefix(SLOT_PREFIX)
        if not slot.isdigit():
            return {}
        if ip != UNUSED_SLOT_IP:
            found[int(slot)] = ip
    return found


def write_hosts(path: Path, hosts: Mapping[str, str]) -> bool:
    """Map each name (of the nodes file) to its IP in our block of the hosts file, keeping
    every other line; returns whether the file changed. No names: the block goes.

    Always written in place (the same inode), never renamed onto: in a pod, `/etc/hosts` is
    the kubelet's bind mount of the pod's own copy, and only its inode is what the pod's
    resolver reads."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not hosts:
            return False
        text = ""
    kept = _without_block(text)
    lines = (f"{ip}\t{name}" for name, ip in sorted(hosts.items(), key=_by_slot))
    block = [HOSTS_BEGIN, *lines, HOSTS_END]
    wanted = kept + "\n".join(block) + "\n" if hosts else kept
    if wanted == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o644, exist_ok=True)
    write_in_place(path, wanted)
    return True


def _by_slot(entry: tuple[str, str]) -> tuple[str, int]:
    """`portal-imex-<token>-<i>` in slot order (10 after 9, not after 1)."""
    stem, _, slot = entry[0].rpartition("-")
    return (stem, int(slot)) if slot.isdigit() else (entry[0], -1)


def remove_hosts(path: Path) -> None:
    write_hosts(path, {})


def _without_block(text: str) -> str:
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith(HOSTS_BEGIN):
            inside = True
        elif line == HOSTS_END:
            inside = False
        elif not inside:
            lines.append(line)
    return "".join(f"{line}\n" for line in lines)


# What a running daemon cannot follow without a new instance: who its peers are and where it
# and they listen. Any other key (the log level, the grace time of a newer agent) waits for
# the daemon's next start: an agent upgrade is never a reason to break running jobs.
RESTART_KEYS = (
    "SERVER_PORT",
    "BIND_INTERFACE_IP",
    "IMEX_CMD_PORT",
    "IMEX_CMD_BIND_INTERFACE_IP",
    "IMEX_NODE_CONFIG_FILE",
)


def config_values(text: str) -> dict[str, str]:
    """`KEY=VALUE` lines, `#` comments, as the daemon reads them."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def write_config(*, paths: Paths, config: str, nodes: str) -> bool:
    """Atomically write both files; True when a running daemon must restart to follow them."""
    try:
        before = config_values(paths.imex_config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        before = {}
    nodes_changed = write_atomic(paths.nodes_file, nodes, durable=False)
    write_atomic(paths.imex_config, config, durable=False)
    after = config_values(config)
    return nodes_changed or any(before.get(k) != after.get(k) for k in RESTART_KEYS)


def remove_config(paths: Paths) -> None:
    remove(paths.imex_config)
    remove(paths.nodes_file)
