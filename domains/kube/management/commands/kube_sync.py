"""`manage.py kube_sync`: run the Node, Namespace and ComputeDomain watches until stopped.

One process per cluster (the Helm chart runs it as a single-replica Deployment). Each
resource has its own thread; SIGTERM/SIGINT set the stop event and the threads finish their
current watch request (at most --watch-timeout seconds).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from domains.kube.client import api_client, kube_enabled
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

    def handle(self, *args: Any, **options: Any) -> None:
        if not kube_enabled():
            raise CommandError("Kubernetes is not configured (PORTAL_KUBE_ENABLED / KUBECONFIG)")
        stop = threading.Event()
        watchers = [
            Watcher(
                r, resync_s=options["resync"], watch_timeout_s=options["watch_timeout"], stop=stop
            )
            for r in resources(api_client())
        ]
        if options["once"]:
            for watcher in watchers:
                watcher.relist()
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        threads = [
            threading.Thread(target=w.run, name=f"watch-{w.resource.name}", daemon=True)
            for w in watchers
        ]
        for thread in threads:
            thread.start()
        self.stdout.write(f"kube_sync: watching {', '.join(w.resource.name for w in watchers)}")
        self.stdout.flush()
        while not stop.wait(1.0):
            if not all(t.is_alive() for t in threads):
                stop.set()
                raise CommandError("a watch thread died")
        # Each watch request may block until its server-side timeout; the work is idempotent
        # and the threads are daemons, so do not wait that long.
        deadline = time.monotonic() + 2
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
