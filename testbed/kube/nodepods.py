"""The pods a real node runs in the tests: each tray's agent and IMEX runner, as the Helm
chart's DaemonSets run them, and workload pods that show what their container sees.

The agent and the runner are real pods on the node's kubelet and containerd, made as the
chart's DaemonSets make them (deploy/helm/domain-portal/templates/agent-daemonset.yaml,
imex-runner-daemonset.yaml): `hostNetwork`, privileged, as root; the agent with `hostPID`,
/dev, /var/run/cdi and the kubelet's plugin directories from the node; the runner with its
own /etc/hosts (the kubelet's per-pod copy). What differs, and why:

- created one per node by the test with `nodeName` (the cluster runs no DaemonSet
  controller); the tray is emulated, so the agent's process is the emulator's fleet runner
  for this one tray (`python -m testbed.emulator.fleet --only <tray>`: the real `nodeagent`
  Agent, with the emulated tray's root, its stand-in NVML and `nvidia-imex`), and the runner
  starts the emulator's daemon;
- the image (`testbed.kube.nodeimage.BUSYBOX`) holds no Python: the machine's /usr, the
  Python installation and the checkout (with its virtualenv) are mounted read-only from
  the host, and the tray's emulated root read-write; the node's /var/run/cdi is mounted
  where the agent, rooted at the tray's root, writes its CDI specs;
- the agent reaches the API server with the suite's kubeconfig (mounted from the host), not
  a service-account token: the cluster's Service address has no proxy behind it here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from nodeagent.dra import DRIVER_NAME
from testbed.emulator.tray import IMEX_BIN
from testbed.kube.nodeimage import BUSYBOX
from testbed.processes import ROOT, VENV_BIN

AGENTS_NAMESPACE = "gpu-portal"
PYTHON = str(VENV_BIN / "python")
ENV = [
    {"name": "IMEX_EMU_PYTHON", "value": PYTHON},
    {"name": "PATH", "value": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin"},
    {"name": "PYTHONPATH", "value": str(ROOT)},  # testbed/ is not installed
    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},  # the checkout is mounted read-only
]


def _host_paths() -> list[tuple[str, str, bool]]:
    """(name, path, read-only) of what the image lacks: the host's userland and Python."""
    paths = [("usr", "/usr", True), ("python", str(Path(sys.base_prefix).resolve()), True)]
    for top in ("/bin", "/sbin", "/lib", "/lib64"):  # over the image's busybox /bin
        if Path(top).exists():
            paths.append((top.strip("/"), top, True))
    paths.append(("checkout", str(ROOT), True))
    return paths


def _volumes(mounts: list[tuple[str, str, str, bool]]) -> dict[str, Any]:
    """(name, host path, container path, read-only) → the pod's volumes and mounts."""
    return {
        "volumes": [
            {"name": n, "hostPath": {"path": host, "type": "DirectoryOrCreate"}}
            for n, host, _, _ in mounts
        ],
        "volumeMounts": [
            {"name": n, "mountPath": path, "readOnly": ro} for n, _, path, ro in mounts
        ],
    }


def _pod(name: str, node: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": AGENTS_NAMESPACE, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "hostNetwork": True,
            "restartPolicy": "Always",
            "containers": [container],
            **spec,
        },
    }


def agent_pod(
    node: str,
    *,
    portal: str,
    join_token: str,
    spec: Path,
    trays: Path,
    kubelet_dirs: Path,
    kubeconfig: Path,
) -> dict[str, Any]:
    """The tray's agent: its DRA plugin under the node's kubelet directory, its per-claim
    CDI specs in the node's /var/run/cdi."""
    tray = trays / node
    kubelet = kubelet_dirs / node
    mounts = [(n, p, p, ro) for n, p, ro in _host_paths()]
    mounts += [
        ("dev", "/dev", "/dev", False),
        ("trays", str(trays), str(trays), False),
        ("cdi-run", "/var/run/cdi", str(tray / "var/run/cdi"), False),
        ("plugins-registry", str(kubelet / "plugins_registry"),
         str(kubelet / "plugins_registry"), False),
        ("plugin-dir", str(kubelet / "plugins" / DRIVER_NAME),
         str(kubelet / "plugins" / DRIVER_NAME), False),
        ("kubeconfig", str(kubeconfig.parent), str(kubeconfig.parent), True),
    ]  # fmt: skip
    volumes = _volumes(mounts)
    args = [
        "-m", "testbed.emulator.fleet", "--portal", portal, "--join-token", join_token,
        "--spec", str(spec), "--root", str(trays), "--only", node,
        "--kubelet-dir", str(kubelet_dirs), "--kubeconfig", str(kubeconfig),
        "--imex-runner", "--poll-interval", "2", "--heartbeat-interval", "5",
    ]  # fmt: skip
    container = {
        "name": "agent",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": [PYTHON],
        "args": args,
        "workingDir": str(ROOT),
        "env": ENV,
        "securityContext": {"privileged": True, "runAsUser": 0},
        "volumeMounts": volumes["volumeMounts"],
    }
    return _pod(
        f"agent-{node}",
        node,
        container,
        hostPID=True,
        terminationGracePeriodSeconds=15,
        volumes=volumes["volumes"],
    )


def runner_pod(node: str, *, trays: Path) -> dict[str, Any]:
    """The tray's IMEX runner, the parent of its (emulated) nvidia-imex; the daemon resolves
    its peers through this pod's /etc/hosts, which the runner keeps."""
    mounts = [(n, p, p, ro) for n, p, ro in _host_paths()]
    mounts += [("dev", "/dev", "/dev", False), ("trays", str(trays), str(trays), False)]
    volumes = _volumes(mounts)
    args = [
        "-m", "nodeagent.runner", "--root", str(trays / node), "--imex-bin", IMEX_BIN,
        "--stop-timeout", "5", "--hosts-file", "/etc/hosts",
    ]  # fmt: skip
    container = {
        "name": "imex-runner",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": [PYTHON],
        "args": args,
        "workingDir": str(ROOT),
        "env": ENV,
        "securityContext": {"privileged": True, "runAsUser": 0},
        "volumeMounts": volumes["volumeMounts"],
    }
    return _pod(
        f"imex-runner-{node}",
        node,
        container,
        terminationGracePeriodSeconds=30,
        automountServiceAccountToken=False,
        volumes=volumes["volumes"],
    )


# What a workload container prints: its channel devices as `ls -ln` shows them (type and
# mode, owner, major, minor), then a line that says it is done, then it waits.
LIST_CHANNELS = (
    "ls -ln /dev/nvidia-caps-imex-channels | grep -c ^c | sed 's/^/count /';"
    " ls -ln /dev/nvidia-caps-imex-channels | grep ^c | head -n 4; echo listed; exec sleep 3600"
)


def channel_pod(name: str, namespace: str, template: str, *, node: str = "") -> dict[str, Any]:
    """A pod as NVIDIA's examples write it (a container and a claim from the template), on
    the node's busybox image, its container listing the channel devices it sees."""
    selector = {"nodeSelector": {"kubernetes.io/hostname": node}} if node else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            **selector,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "ctr",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", LIST_CHANNELS],
                    "resources": {"claims": [{"name": "channel"}]},
                }
            ],
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
        },
    }
