# SPDX-License-Identifier: Apache-2.0
"""The agent's side of the DRA kubelet plugin: the plugin, its ResourceSlice, and what the
tray serves as the reconcile loop last saw it.

The loop owns the tray; the plugin's gRPC threads ask it, through `TrayServing` (the
plugin's `TrayView`), to fetch the desired state at once (a claim was admitted) and wait
here until the tray serves a claim's domain. Without a kubelet directory there is no
plugin and all of this does nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from agentwire.messages import DesiredDomain, DesiredState
from nodeagent.client import PortalClient
from nodeagent.config import AgentConfig
from nodeagent.dra.claims import Serving
from nodeagent.dra.plugin import DraPlugin, PluginConfig
from nodeagent.dra.slices import scheduling
from nodeagent.facts import FactsKeeper


class TrayServing:
    def __init__(
        self,
        config: AgentConfig,
        facts: FactsKeeper,
        client: PortalClient,
        *,
        nudge: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        self.cfg = config
        self.paths = config.paths
        self.facts = facts
        self._nudge = nudge
        self.stop_event = stop
        # What the tray serves, as last observed, for the plugin's gRPC threads.
        self.serving: Serving | None = None
        self.changed = threading.Condition()
        self.plugin = self._plugin(client)

    def _plugin(self, client: PortalClient) -> DraPlugin | None:
        if self.cfg.kubelet_dir is None:
            return None
        config = PluginConfig(
            kubelet_dir=self.cfg.kubelet_dir,
            kubeconfig=self.cfg.kubeconfig,
            cdi_dir=self.paths.cdi_run_dir,
            state_dir=self.paths.state_dir,
            prepare_wait_s=self.cfg.prepare_wait_s,
            boot_id_file=self.paths.boot_id,
        )
        name = self.cfg.hostname or self.facts.probe().hostname
        return DraPlugin(config, node_name=name, root=self.paths.root, client=client, tray=self)

    # --- the loop's side --------------------------------------------------------------------
    def start(self, desired: DesiredState | None, *, fetched: bool) -> None:
        """Once joined (admitting a claim needs the node token): the plugin's servers, the
        slice with the domain last known (the portal may be away: then not eligible), stale
        claims undone."""
        if self.plugin is not None:
            self.plugin.start()
            self.publish_slice(desired, fetched=fetched)
            self.plugin.drop_stale_claims()
            self.plugin.tell_portal()

    def publish_slice(self, desired: DesiredState | None, *, fetched: bool) -> None:
        if self.plugin is not None:
            domain, eligible = scheduling(desired, fetched=fetched)
            self.plugin.publish_slice(dict(self.facts.document()), domain, eligible=eligible)

    def serve(
        self, want: DesiredDomain, daemon_state: str, channels: list[int], major: int | None
    ) -> None:
        """What the tray serves for `want` now."""
        self.set(
            Serving(
                domain_uid=want["uid"],
                daemon_state=daemon_state,
                channels=list(channels),
                major=major,
                mode=want["channels"]["mode"],
                file_mode=self.cfg.channel_mode,
                gid=self.cfg.channel_gid,
            )
        )

    def set(self, serving: Serving | None) -> None:
        if serving == self.serving:
            return
        with self.changed:
            self.serving = serving
            self.changed.notify_all()

    def stop(self) -> None:
        """The agent stops: a prepare waiting for the daemon answers now."""
        with self.changed:
            self.changed.notify_all()
        if self.plugin is not None:
            with contextlib.suppress(Exception):
                self.plugin.stop()

    # --- what the plugin asks (TrayView) ----------------------------------------------------
    def nudge(self) -> None:
        self._nudge()

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving | None:
        """What the tray serves for `domain_uid` once its daemon is READY with channels, or
        as it is after `timeout` (None when it does not serve that domain)."""

        def ready() -> bool:
            s = self.serving
            return self.stop_event.is_set() or bool(
                s and s.domain_uid == domain_uid and s.daemon_state == "READY" and s.channels
            )

        with self.changed:
            self.changed.wait_for(ready, timeout)
            current = self.serving
        return current if current and current.domain_uid == domain_uid else None
