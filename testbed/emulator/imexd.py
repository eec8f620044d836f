# SPDX-License-Identifier: Apache-2.0
"""Emulated `nvidia-imex`: one per tray, really talking to its peers over TCP.

Usage: `nvidia-imex -c <config>` (`bin/nvidia-imex` runs `imex.py`, which runs this). It
behaves as NVIDIA documents its daemon (reference/IMEX-FACTS.md and the IMEX guide), the
unkind parts included, and costs what a native daemon costs: lean stdlib modules only (no
`socket`, `json`, `signal` or `selectors` wrappers: their imports were most of a start), one
epoll loop, no timers while nothing happens, and status gathered only when someone asks.

The daemon is four layers, each a class the next one extends:
  imexstate.py    what it knows: config, fault knobs, log, state machine, the nodes file
                  and each peer's connection cell, the recovery quorum (persist.dat)
  imexnet.py      its sockets: server and command ports, peer connections, hellos
  imexcontrol.py  what `nvidia-imex-ctl` is answered, the status rows peers exchange for
                  it, and the signals it obeys
  imexd.py        (this) start, the event loop and its timers, shutdown

Start. The config is read once (`KEY=VALUE`, `#` comments). Only one daemon per tray: a
second exits with NV_ERR_IN_USE. The daemon refuses to start (exit 1, message on stderr and
in its log) when its own version differs from the loaded driver's, which it reads from the
tray's `proc/driver/nvidia/version` as the real one reads `/proc/driver/nvidia/version`
(no file: no driver loaded, same refusal). Every instance that takes the tray appends a
line to `run/nvidia-emu/starts`, so a test can prove that a daemon never restarted.
States: INITIALIZING → STARTING_AUTH_SERVER → [WAITING_FOR_RECOVERY] → INIT_GPU → READY,
SHUTTING_DOWN on SIGTERM/SIGINT/SIGQUIT. READY is per node: a daemon serves as soon as it
is initialised, whether or not its peers are there (`-q`); the domain's health is `-N`'s
business (UP / DEGRADED / DOWN).
LOG_LEVEL: 0 nothing, 1 critical, 2 error, 3 warning, 4 info (default).

Fault knobs (the world, not our code), JSON in `run/nvidia-emu/faults.json` (plus env
IMEX_EMU_FAULTS at start). Read at start; re-read when the daemon gets SIGUSR2 (an
emulator-only signal; `tray.set_faults` sends it to a running daemon):
  start_delay_s   initialise this much slower (at start)
  crash_after_s   exit uncleanly this long after start
  refuse_peers    [IP, ...]: connections from these addresses are dropped on arrival
  cut_peers       [IP, ...]: all traffic with these addresses is cut — established
                  connections drop without a goodbye, none are made (live: a cut for N
                  seconds then restored is a network blip). Both ends notice at once;
                  a real daemon would notice a silent network at its keepalive timeout.
  version         this tray runs another driver release (driver and IMEX alike): peers
                  see !V!
  imex_version    the installed nvidia-imex is of another release than the loaded driver:
                  the daemon refuses to start
  stale_node_map  an extra nodes-file entry, as if this tray kept an old nodes file (!M!)
  stopped         the daemon refuses to start, as one whose tray lost its driver would (the
                  demo's tray control: `python -m testbed.emulator.trayctl stop-daemon`)
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found,unused-ignore]  # no stub; `signal` costs 5 ms
import os
import sys
import time

from testbed.emulator.imexcontrol import SHUTDOWN_SIGNALS, ControlSurface
from testbed.emulator.imexfiles import Fatal, read_config
from testbed.emulator.imexnet import EPOLLERR, EPOLLIN, EPOLLOUT, Link


class Daemon(ControlSurface):
    """One `nvidia-imex`: started, run until a shutdown signal, stopped cleanly."""

    def start(self) -> None:
        if self.cfg.get("LOG_FILE_NAME"):
            self.log_fh = open(self.cfg["LOG_FILE_NAME"], "a", encoding="utf-8")  # noqa: SIM115
        self.take_tray_lock()
        self.count_start()
        self.identify()
        self.read_node_map()
        delay = float(self.faults.get("start_delay_s") or 0)
        if delay:
            self.sleep(delay)  # a slow initialisation (fault knob); SIGTERM still stops it
            if self.stop:
                return
        self.set_state("STARTING_AUTH_SERVER")
        self.server = self.listen_tcp(self.ip, self.port, "peer")
        self.open_command_service()
        self.decide_recovery()
        if not self.recovering:
            self.become_ready()

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stop and time.monotonic() < deadline:
            for _fd, _ev in self.ep.poll(max(0.0, deadline - time.monotonic())):
                self.on_signals()

    # --- loop -----------------------------------------------------------------------------
    def run(self) -> int:
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        self.signal_fd = rfd
        _signal.set_wakeup_fd(wfd)
        for sig in (*SHUTDOWN_SIGNALS, _signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGHUP):
            _signal.signal(sig, _ignore)
        self.ep.register(rfd, EPOLLIN)
        try:
            self.start()
        except (Fatal, OSError) as exc:
            self.log(str(exc), 1)
            if self.log_fh is not sys.stderr or self.log_level < 1:
                print(f"nvidia-imex: {exc}", file=sys.stderr, flush=True)
            return 1
        while not self.stop:
            timeout = self.timers(time.monotonic())
            for fd, events in self.ep.poll(timeout):
                self.dispatch(fd, events)
        return self.shutdown()

    def timers(self, now: float) -> float:
        """Run what is due; returns how long the loop may sleep (-1: until something happens)."""
        if self.crash_at is not None and now >= self.crash_at:
            self.log("crashing (fault knob crash_after_s)", 1)
            if self.persist_dirty:
                self.write_persist()
            os._exit(1)
        due = [self.crash_at] if self.crash_at is not None else []
        if self.persist_dirty:
            if self.persist_due <= now:
                self.write_persist()
            else:
                due.append(self.persist_due)
        if self.retry_at:  # empty once every peer is connected: an idle loop scans nothing
            for peer, at in list(self.retry_at.items()):
                if at <= now:
                    del self.retry_at[peer]
                    self.connect(peer)  # an unreachable peer waits for SIGUSR1 or a restore
            due.extend(self.retry_at.values())
        for peer, until in list(self.lost_until.items()):
            if until <= now:
                self.clean_up(peer, f"not back within the grace time ({self.grace:g} s)")
            else:
                due.append(until)
        if self.recovery_deadline is not None:
            if self.recovery_deadline <= now:
                self.give_up_recovery()
            else:
                due.append(self.recovery_deadline)
        self.expire_queries(now, due)
        return max(0.0, min(due) - now) if due else -1

    def dispatch(self, fd: int, events: int) -> None:
        if fd == self.signal_fd:
            self.on_signals()
            return
        if fd in self.listeners:
            self.accept(fd)
            return
        link = self.links.get(fd)
        if link is None:
            return
        if link.connecting:
            self.connected(link)
            return
        if events & EPOLLOUT:
            self.flush(link)
        if events & (EPOLLIN | EPOLLERR) and link.fd in self.links:
            self.on_readable(link)

    def on_readable(self, link: Link) -> None:
        try:
            data = link.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.drop(link)
            return
        link.rbuf += data
        while b"\n" in link.rbuf and link.fd in self.links:
            raw, _, link.rbuf = link.rbuf.partition(b"\n")
            line = raw.decode("ascii", "replace")
            if link.kind == "cmd":
                self.on_command(link, line)
                return
            self.on_peer_line(link, line)

    def shutdown(self) -> int:
        self.set_state("SHUTTING_DOWN")
        self.say_goodbye()
        self.importers.clear()
        self.recovering.clear()
        self.write_persist()  # a clean shutdown leaves only the key: no recovery wait
        if self.unix_path:
            os.unlink(self.unix_path)
        self.mark_stopped()
        self.log("IMEX daemon stopped")
        self.dump_verbose()
        with open(os.path.join(self.emu_dir, "served"), "a", encoding="utf-8") as fh:
            cpu_ms = round(time.process_time() * 1000, 1)  # this process's CPU so far (since exec)
            fh.write(" ".join(map(str, [*self.served, cpu_ms])) + "\n")  # bench/formation.py
        return 0


def _ignore(signum: int, frame: object) -> None:
    """The wakeup fd carries the signal to the loop; the handler itself does nothing."""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    config = "/etc/nvidia-imex/config.cfg"
    if "-c" in args:
        at = args.index("-c")
        if at + 1 >= len(args):
            print("nvidia-imex: -c needs a config file path", file=sys.stderr)
            return 2
        config = args[at + 1]
    try:
        cfg = read_config(config)
    except OSError as exc:
        print(f"nvidia-imex: cannot read the config file {config}: {exc}", file=sys.stderr)
        return 1
    if cfg.get("DAEMONIZE", "1") == "1":
        # The real daemon forks into the background by default; an agent sets DAEMONIZE=0.
        if os.fork():
            return 0
        os.setsid()
    return Daemon(config, cfg).run()


if __name__ == "__main__":
    sys.exit(main())
