# SPDX-License-Identifier: Apache-2.0
"""The emulated daemon's control surface: what `nvidia-imex-ctl` asks and is answered, the
status rows peers exchange for it, and the signals the daemon obeys.

Command service. `nvidia-imex-ctl` sends its flags on one line; `-q` is one word, `-N` the
legend, nodes, matrix and "Domain State", `-j` JSON, `-H` host names. A node that cannot be
reached has its row in `-N` all I.

Status exchange. Nothing is broadcast. `-N` asks each connected peer for its row once
(one message out, one back per peer) and answers when all have replied (2 s at most), so
what a query costs grows linearly with the peers, and an idle domain exchanges nothing.

Signals. SIGUSR1 re-reads the hosts file, re-resolves every name and reconnects to peers
whose address changed or appeared; established connections to unchanged addresses stay as
they are (no restart, nothing cleaned up). As NVIDIA documents, SIGUSR1 is processed at
most once every 5 seconds: one arriving within 5 s of the last processed one is ignored
(and logged as such). SIGHUP does not reload anything: it dumps the buffered messages
above LOG_LEVEL to the log (as the real one does; the buffer is also dumped at shutdown).
SIGUSR2 (the emulator's own) re-reads the fault knobs. SIGTERM, SIGINT and SIGQUIT stop it.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found,unused-ignore]  # no stub; `signal` costs 5 ms
import os
import time

from testbed.emulator.imexfiles import read_json
from testbed.emulator.imexnet import Link, PeerNetwork
from testbed.emulator.imexview import NodeView, render_json, render_text

USR1_INTERVAL_S = 5.0  # NVIDIA: SIGUSR1 is processed at most once every 5 seconds
QUERY_TIMEOUT_S = 2.0
SHUTDOWN_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGQUIT)


class Query:
    """A `-N` waiting for its peers' rows."""

    __slots__ = ("deadline", "flags", "link", "qid", "rows", "waiting")

    def __init__(self, qid: int, link: Link, flags: list[str], waiting: set[int]) -> None:
        self.qid, self.link, self.flags, self.waiting = qid, link, flags, waiting
        self.deadline = time.monotonic() + QUERY_TIMEOUT_S
        self.rows: dict[int, list[str]] = {}


class ControlSurface(PeerNetwork):
    """Answers `nvidia-imex-ctl` and peers' row requests; obeys signals."""

    signal_fd: int

    def __init__(self, config_path: str, cfg: dict[str, str]) -> None:
        self.queries: dict[int, Query] = {}
        self.next_query = 1
        self.stop = False
        self.usr1_at: float | None = None
        self.seen_status: dict[int, str] = {}
        self.served = [0, 0, 0]  # -q asked, -N asked, rows sent to peers' -N (see shutdown)
        super().__init__(config_path, cfg)

    # --- what peers say -----------------------------------------------------------------------
    def on_peer_line(self, link: Link, line: str) -> None:
        words = line.split()
        if not words:
            return
        kind = words[0]
        if kind == "H" and len(words) == 7:
            if link.kind == "out":
                self.on_hello_out(link, words)
            else:
                self.on_hello_in(link, words)
        elif kind == "A" and link.kind == "in" and link.up:
            self.served[2] += 1
            self.send(link, self.row_reply(words[1]))
        elif kind == "R" and link.kind == "out":
            query = self.queries.get(int(words[1]))
            if query is not None and link.peer in query.waiting:
                query.rows[link.peer] = words[2:]
                query.waiting.discard(link.peer)
                self.maybe_answer(query)
        elif kind == "B" and link.peer in self.out:
            self.peer_said_goodbye(link.peer)
            self.drop(link, lost=False)

    def row_reply(self, qid: str) -> bytes:
        if not self.row:  # kept until a state or a cell changes: answering is one send
            cells = " ".join(f"{k}:{c}" for k, c in self.cells.items())
            self.row = f" {self.state} {self.version} {self.hostname or '-'} {cells}\n".encode()
        return b"R " + qid.encode() + self.row

    def stop_waiting_for(self, peer: int) -> None:
        for query in list(self.queries.values()):
            if peer in query.waiting:
                query.waiting.discard(peer)
                self.maybe_answer(query)

    # --- the command service ------------------------------------------------------------------
    def on_command(self, link: Link, line: str) -> None:
        if self.persist_dirty:
            self.write_persist()
        flags = line.split()
        if "-q" in flags:
            self.served[0] += 1
            self.reply(link, self.state + "\n")
            return
        self.served[1] += 1
        up = [(k, out) for k, out in self.out.items() if out is not None and out.up]
        query = Query(self.next_query, link, flags, {k for k, _ in up})
        self.next_query += 1
        self.queries[query.qid] = query
        ask = f"A {query.qid}\n".encode()
        for _, out in up:
            self.send(out, ask)  # a failed send drops the link, which stops the wait for it
        self.maybe_answer(query)

    def maybe_answer(self, query: Query, *, timed_out: bool = False) -> None:
        if (query.waiting and not timed_out) or self.queries.pop(query.qid, None) is None:
            return
        if self.links.get(query.link.fd) is query.link:  # the client may have gone
            self.reply(query.link, self.render(query))

    def expire_queries(self, now: float, due: list[float]) -> None:
        """Answer the `-N` whose peers did not all reply in time; the others' deadlines
        join `due`."""
        for query in list(self.queries.values()):
            if query.deadline <= now:
                self.maybe_answer(query, timed_out=True)
            else:
                due.append(query.deadline)

    def reply(self, link: Link, text: str) -> None:
        link.closing = True
        self.send(link, text.encode())

    def domain_view(self, query: Query) -> tuple[str, list[NodeView]]:
        """(domain state, one dict per node) as this daemon sees the domain right now."""
        nodes = []
        all_up = self.state == "READY"
        for k, host in enumerate(self.entries):
            if k == self.index:
                status, version, name, row = self.state, self.version, self.hostname, self.cells
            elif k in query.rows:
                words = query.rows[k]
                status, version, name = words[0], words[1], "" if words[2] == "-" else words[2]
                row = {int(j): c for j, _, c in (w.partition(":") for w in words[3:])}
            else:
                status, version, name, row = "UNAVAILABLE", "", "", {}
            cells = [(j, "C" if j == k else row.get(j, "I")) for j in range(len(self.entries))]
            all_up = all_up and status == "READY" and all(c == "C" for _, c in cells)
            changed = self.seen_status.get(k) != status
            self.seen_status[k] = status
            nodes.append(NodeView(status, host, version, name, changed, cells))
        if all_up:
            return "UP", nodes
        return ("DEGRADED" if self.state == "READY" else "DOWN"), nodes

    def render(self, query: Query) -> str:
        domain, nodes = self.domain_view(query)
        if "-j" in query.flags:
            return render_json(domain, nodes, self.entries, "-H" in query.flags)
        return render_text(domain, nodes, "-H" in query.flags)

    # --- signals ------------------------------------------------------------------------------
    def on_signals(self) -> None:
        try:
            data = os.read(self.signal_fd, 64)
        except BlockingIOError:
            return
        for signum in data:
            if signum in SHUTDOWN_SIGNALS:
                self.stop = True
            elif signum == _signal.SIGUSR1:
                self.on_usr1()
            elif signum == _signal.SIGUSR2:
                self.faults = read_json(os.path.join(self.emu_dir, "faults.json"))
                self.apply_faults()
                self.log(f"SIGUSR2 (emulator): fault knobs re-read: {sorted(self.faults)}")
                self.apply_cuts()
            elif signum == _signal.SIGHUP:
                self.log("SIGHUP: dumping the verbose log buffer (configuration not reloaded)")
                self.dump_verbose()

    def on_usr1(self) -> None:
        now = time.monotonic()
        if self.usr1_at is not None and now - self.usr1_at < USR1_INTERVAL_S:
            self.log(
                f"SIGUSR1 ignored: the last one was processed {now - self.usr1_at:.1f} s ago "
                f"(at most one every {USR1_INTERVAL_S:.0f} s)",
                3,
            )
            return
        self.usr1_at = now
        if not self.out:
            return  # still initialising (names are resolved next), or no peers at all
        fresh = self.resolve_all()
        changed = 0
        for peer in self.out:
            if fresh[peer] != self.addrs[peer]:
                changed += 1
                self.log(f"node {peer} ({self.entries[peer]}): {self.addrs[peer]} -> {fresh[peer]}")
                self.addrs[peer] = fresh[peer]
                link = self.out[peer]
                if link is not None:
                    self.drop(link)  # that address is no longer this node
                self.call_now(peer)
            elif self.out[peer] is None:
                self.call_now(peer)
        self.log(f"SIGUSR1: names re-resolved, {changed} address(es) changed; reconnecting")
