"""`manage.py kube_sync`: run the Node, Namespace and ComputeDomain watches until stopped.

Each resource has its own thread; SIGTERM/SIGINT set the stop event and the threads finish
their current watch request (at most --watch-timeout seconds).

Several may run (the Helm chart runs two): with `--leader-elect` one holds a Lease and
watches, the others wait to take over (`domains.kube.election`). A leader that loses the
Lease stops writing at once and exits non-zero, so its pod restarts as a candidate; one that
is stopped hands the Lease over first. Without it, run only one.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from domains.kube.client import api_client, kube_enabled
from domains.kube.election import LEASE_NAME, Elector, Timing, default_namespace, gated
from domains.kube.sync import RESYNC_S, WATCH_TIMEOUT_S, Watcher, resources


class Command(BaseCommand):
    help = "Sync Nodes, Namespaces and ComputeDomains from Kubernetes (list + watch)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--resync", type=float, default=RESYNC_S, help="seconds between relists"
        )
        parser.add_argument(
            "--watch-timeout", type=int, default=WATCH_TIMEOUT_S, help="seconds per watch request"
        )
        parser.add_argument("--once", action="store_true", help="list everything once and exit")
        parser.add_argument(
            "--leader-elect",
            action="store_true",
            help="watch only while holding the Lease, so that several may run (the chart's way)",
        )
        parser.add_argument("--lease-name", default=LEASE_NAME)
        parser.add_argument(
            "--lease-namespace", default="", help="default: the pod's namespace (POD_NAMESPACE)"
        )
        timing = Timing()
        for flag, default in (
            ("--lease-duration", timing.lease_s),
            ("--renew-deadline", timing.renew_deadline_s),
            ("--retry-period", timing.retry_s),
        ):
            parser.add_argument(flag, type=float, default=default, help="seconds")

    def handle(self, *args: Any, **options: Any) -> None:
        if not kube_enabled():
            raise CommandError("Kubernetes is not configured (PORTAL_KUBE_ENABLED / KUBECONFIG)")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        api = api_client()
        found = resources(api)
        elector = self.elector(api, stop, options) if options["leader_elect"] else None
        if elector is not None:
            self.say(
                f"waiting for the lease {elector.namespace}/{elector.name} as {elector.identity}"
            )
            if not elector.acquire():
                return  # stopped while a candidate
            threading.Thread(target=elector.keep, name="lease", daemon=True).start()
            found = [gated(r, elector.leading) for r in found]
            self.say(f"leading as {elector.identity}")
        watchers = [
            Watcher(
                r, resync_s=options["resync"], watch_timeout_s=options["watch_timeout"], stop=stop
            )
            for r in found
        ]
        if options["once"]:
            for watcher in watchers:
                watcher.relist()
            if elector is not None:
                elector.release()
            return
        try:
            self.watch(watchers, stop)
        finally:
            if elector is not None and not elector.lost.is_set():
                elector.release()
        if elector is not None and elector.lost.is_set():
            raise CommandError("lost the lease: stopped watching; restart to stand again")

    def elector(self, api: Any, stop: threading.Event, options: dict[str, Any]) -> Elector:
        try:
            timing = Timing(
                options["lease_duration"], options["renew_deadline"], options["retry_period"]
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        return Elector(
            api,
            namespace=options["lease_namespace"] or default_namespace(),
            name=options["lease_name"],
            timing=timing,
            stop=stop,
        )

    def say(self, line: str) -> None:
        self.stdout.write(f"kube_sync: {line}")
        self.stdout.flush()

    def watch(self, watchers: list[Watcher], stop: threading.Event) -> None:
        threads = [
            threading.Thread(target=w.run, name=f"watch-{w.resource.name}", daemon=True)
            for w in watchers
        ]
        for thread in threads:
            thread.start()
        self.say(f"watching {', '.join(w.resource.name for w in watchers)}")
        while not stop.wait(1.0):
            if not all(t.is_alive() for t in threads):
                stop.set()
                raise CommandError("a watch thread died")
        # Each watch request may block until its server-side timeout; the work is idempotent
        # and the threads are daemons, so do not wait that long.
        deadline = time.monotonic() + 2
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
