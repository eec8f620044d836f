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
"""

from __future__ import annotations

import itertools
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.processes import Proc, wait_until


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
