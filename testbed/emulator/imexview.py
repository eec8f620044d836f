# SPDX-License-Identifier: Apache-2.0
"""What `nvidia-imex-ctl -N` prints: the legend, the nodes, the connection matrix and the
domain state, as text or as NVIDIA's JSON (status, nodes keyed by index strings, each with
status, host, version, changed, optional hostName and connections keyed by peer index).

Hand-built JSON: `_json`'s string quoting only, so the daemon never imports `json`.
"""

from __future__ import annotations

import time
from _json import encode_basestring_ascii as _quote

CELL_WORDS = {
    "C": "CONNECTED",
    "N": "NEVER_CONNECTED",
    "R": "RECOVERING",
    "D": "DISCONNECTED",
    "I": "INVALID",
    "!V!": "VERSION_MISMATCH",
    "!M!": "NODE_MAP_MISMATCH",
}
LEGEND = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggered.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""


class NodeView:
    """One node of `-N` as the asking daemon sees it; `cells` is its row, (peer, cell)."""

    __slots__ = ("cells", "changed", "host", "name", "status", "version")

    def __init__(
        self, status: str, host: str, version: str, name: str, changed: bool,
        cells: list[tuple[int, str]],
    ) -> None:  # fmt: skip
        self.status, self.host, self.version, self.name = status, host, version, name
        self.changed, self.cells = changed, cells


def render_json(domain: str, nodes: list[NodeView], entries: list[str], hostnames: bool) -> str:
    """The `-N -j` document (NVIDIA's shape: status, nodes keyed by index strings).

    One node per line rather than indented: the ctl (bash) copies the reply character by
    character, so an 18-node document at half the size is half a millisecond less."""
    quoted = [_quote(entry) for entry in entries]
    lines = []
    for k, node in enumerate(nodes):
        conns = ", ".join(
            f'"{j}": {{"host": {quoted[j]}, "status": "{CELL_WORDS[cell]}"}}'
            for j, cell in node.cells
            if j != k
        )
        name = f'"hostName": {_quote(node.name)}, ' if hostnames and node.name else ""
        lines.append(
            f'  "{k}": {{"status": {_quote(node.status)}, "host": {quoted[k]}, '
            f'"version": {_quote(node.version)}, '
            f'"changed": {"true" if node.changed else "false"}, {name}'
            f'"connections": {{{conns}}}}}'
        )
    body = ",\n".join(lines)
    return f'{{"status": "{domain}", "nodes": {{\n{body}\n}}}}\n'


def render_text(domain: str, nodes: list[NodeView], hostnames: bool) -> str:
    now = time.time()
    lt = time.localtime(now)
    stamp = f"{lt.tm_mon}/{lt.tm_mday}/{lt.tm_year} {time.strftime('%H:%M:%S', lt)}"
    lines = [LEGEND, f"{stamp}.{int(now * 1000) % 1000:03d}", "Nodes:"]
    for k, node in enumerate(nodes):
        host = node.host + (f" ({node.name})" if hostnames and node.name else "")
        lines.append(f"Node #{k:<3} - {host:<15} - {node.status:<20} - Version: {node.version}")
    lines.append("")
    lines.append(" Nodes From\\To  " + "".join(f"{j:<4}" for j in range(len(nodes))))
    for k, node in enumerate(nodes):
        lines.append(f"       {k:<8} " + "".join(f"{c:<4}" for _, c in node.cells))
    lines.append(f"Domain State: {domain}")
    return "\n".join(lines) + "\n"
