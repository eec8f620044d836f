"""The kubelet's DRA side built from upstream's code (`kubelet-dra`, from tools/kubeplane),
run for one Node against a real API server.

    kubelet = KubeletDra(bin_dir, kubeconfig=..., node="gb-r01-t01", root=kubelet_dir)
    kubelet.start()
    kubelet.prepared(pod_uid)  # {container: [CDI device ids]} once the pod's claims are

It watches `<root>/plugins_registry` with the kubelet's plugin manager, so a DRA plugin
registers with it as with a kubelet; at start it deletes every ResourceSlice of its Node
(the kubelet's startup wipe); it prepares the claims of the pods bound to its Node and
unprepares them when the pod is gone, a failed pod tried again after the kubelet's pod
worker backoff (10-15 s). `restart(reboot=True)` first empties the `tmpfs` directories and
writes a new boot id, as a reboot of the machine would.

The program prints one JSON line per pod event (`prepared`, `prepareFailed`, `unprepared`),
each with its time, among its logs; `events()` reads them back.

`KubeletFleet` runs one for every tray of an `AgentFleet`, as every Node has its kubelet:

    with KubeletFleet(bin_dir, fleet, kubeconfig=..., root=kubelet_dir) as kubelets:
        kubelets.wait_registered(DRIVER_NAME)
        node, devices = kubelets.wait_prepared(pod_uid)
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeagent.config import CHANNELS_DIR
from testbed.processes import Proc, wait_until

if TYPE_CHECKING:
    from testbed.agents import AgentFleet


class KubeletDra:
    def __init__(
        self,
        bin_dir: Path,
        *,
        kubeconfig: Path,
        node: str,
        root: Path,
        tmpfs: tuple[Path, ...] = (),
        boot_id_file: Path | None = None,
    ) -> None:
        self.binary = bin_dir / "kubelet-dra"
        self.kubeconfig = kubeconfig
        self.node = node
        self.root = root
        self.tmpfs = tmpfs
        self.boot_id_file = boot_id_file
        self.proc: Proc | None = None
        self.runs: list[Proc] = []

    def start(self, *, reboot: bool = False) -> KubeletDra:
        argv = [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--node-name={self.node}",
            f"--root-dir={self.root}",
            *(f"--tmpfs={path}" for path in self.tmpfs),
            "-v=3",
        ]
        if self.boot_id_file:
            argv.append(f"--boot-id-file={self.boot_id_file}")
        if reboot:
            argv.append("--reboot")
        self.proc = Proc(f"kubelet-dra-{self.node}", argv, dict(os.environ))
        self.runs.append(self.proc)
        wait_until(lambda: self._started() or not self._alive(), 20, what="kubelet-dra to start")
        return self

    def _alive(self) -> bool:
        if self.proc is None or not self.proc.alive():
            raise RuntimeError(f"kubelet-dra exited:\n{self.log()[-4000:]}")
        return True

    def _started(self) -> bool:
        return any(e["event"] == "started" for e in self.events())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def restart(self, *, reboot: bool = False) -> None:
        self.stop()
        self.start(reboot=reboot)

    def log(self) -> str:
        return self.proc.log() if self.proc else ""

    def events(self) -> list[dict[str, Any]]:
        """This run's pod events, oldest first."""
        found = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found

    def registered(self, driver: str) -> bool:
        """The kubelet's DRA registration handler took the driver's plugin."""
        self._alive()
        return any(
            '"Registered DRA plugin"' in line and f'driverName="{driver}"' in line
            for line in self.log().splitlines()
        )

    def prepared(self, pod_uid: str) -> dict[str, list[str]] | None:
        """The pod's containers' CDI device ids, once its claims were prepared in this run."""
        self._alive()
        for event in self.events():
            if event["event"] == "prepared" and event["uid"] == pod_uid:
                return dict(event["cdiDevices"])
        return None

    def attempts(self, pod_uid: str) -> list[dict[str, Any]]:
        """This run's prepare attempts of the pod that ended, failed or not, oldest first."""
        ended = ("prepared", "prepareFailed")
        return [e for e in self.events() if e["event"] in ended and e["uid"] == pod_uid]

    def retry_gaps(self, pod_uid: str) -> list[float]:
        """Seconds from each attempt's end to the next's."""
        times = [datetime.fromisoformat(e["time"]) for e in self.attempts(pod_uid)]
        return [(b - a).total_seconds() for a, b in itertools.pairwise(times)]

    def failures(self, pod_uid: str) -> list[str]:
        return [
            e["error"]
            for e in self.events()
            if e["event"] == "prepareFailed" and e["uid"] == pod_uid
        ]


class KubeletFleet:
    """One `KubeletDra` per tray of an `AgentFleet`: the kubelet of each Node, its tmpfs the
    tray's CDI and channel directories, its boot id the tray's."""

    def __init__(
        self, bin_dir: Path, fleet: AgentFleet, *, kubeconfig: Path, root: Path | None = None
    ) -> None:
        """`root`: the kubelet directories' parent (each Node's is `<root>/<hostname>`), by
        default the fleet's `kubelet_dir`, where its agents register their plugins."""
        root = root or fleet.kubelet_dir
        if root is None:
            raise ValueError("root: the fleet has no kubelet_dir to share")
        self.kubelets: dict[str, KubeletDra] = {}
        for host in fleet.hostnames:
            tray = fleet.tray_root(host)
            self.kubelets[host] = KubeletDra(
                bin_dir,
                kubeconfig=kubeconfig,
                node=host,
                root=root / host,
                tmpfs=(tray / "var/run/cdi", tray / CHANNELS_DIR),
                boot_id_file=tray / "proc/sys/kernel/random/boot_id",
            )

    def __getitem__(self, node: str) -> KubeletDra:
        return self.kubelets[node]

    def __iter__(self) -> Iterator[KubeletDra]:
        return iter(self.kubelets.values())

    def start(self) -> KubeletFleet:
        for kubelet in self.kubelets.values():
            if kubelet.proc is None or not kubelet.proc.alive():
                kubelet.start()
        return self

    def stop(self) -> None:
        for kubelet in self.kubelets.values():
            kubelet.stop()

    def __enter__(self) -> KubeletFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_registered(self, driver: str, timeout: float = 30) -> None:
        """Every Node's kubelet took the driver's plugin."""
        wait_until(
            lambda: all(k.registered(driver) for k in self.kubelets.values()),
            timeout,
            what=f"{driver} registered with every kubelet",
        )

    def prepared(self, pod_uid: str) -> tuple[str, dict[str, list[str]]] | None:
        """(the Node whose kubelet prepared the pod's claims, its containers' CDI device
        ids), or None while no kubelet has."""
        for node, kubelet in self.kubelets.items():
            devices = kubelet.prepared(pod_uid)
            if devices is not None:
                return node, devices
        return None

    def wait_prepared(self, pod_uid: str, timeout: float = 30) -> tuple[str, dict[str, list[str]]]:
        found: tuple[str, dict[str, list[str]]] = wait_until(
            lambda: self.prepared(pod_uid), timeout, what=f"pod {pod_uid}'s claims prepared"
        )
        return found

    def wait_all_prepared(
        self, pod_uids: Iterable[str], timeout: float = 60
    ) -> dict[str, tuple[str, dict[str, list[str]]]]:
        """pod uid → (Node, CDI device ids per container), once every pod's claims are."""
        uids = list(pod_uids)

        def every() -> dict[str, tuple[str, dict[str, list[str]]]] | None:
            found = {uid: self.prepared(uid) for uid in uids}
            if any(v is None for v in found.values()):
                return None
            return {uid: v for uid, v in found.items() if v is not None}

        done: dict[str, tuple[str, dict[str, list[str]]]] = wait_until(
            every, timeout, what=f"{len(uids)} pods' claims prepared"
        )
        return done

    def failures(self, pod_uid: str) -> list[str]:
        return [e for k in self.kubelets.values() for e in k.failures(pod_uid)]

    def unprepared(self, pod_uid: str) -> bool:
        """Some kubelet unprepared the pod's claims (the pod is gone)."""
        return any(
            e["event"] == "unprepared" and e["uid"] == pod_uid
            for k in self.kubelets.values()
            for e in k.events()
        )
