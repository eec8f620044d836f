"""The configuration files of a real node: containerd's, the CNI network's, the kubelet's.

Everything a node writes goes under its own directory, its private /run (testbed.kube.
nodeinit) or its own cgroup root; nothing is written to the machine's /etc, /var or /opt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from testbed.kube.nodeimage import PAUSE

RUNC = "/usr/sbin/runc"
CNI_BIN = Path("/usr/lib/cni")
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
# Plugins a node does not need, and that would otherwise look for or write host paths
# (/opt/containerd, NRI's socket) or storage this machine lacks. (The image verifiers'
# plugin stays, pointed at the node's own directory: CRI needs it.)
DISABLED_PLUGINS = (
    "io.containerd.internal.v1.opt",
    "io.containerd.nri.v1.nri",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.snapshotter.v1.erofs",
)


def containerd_toml(node_dir: Path) -> str:
    """containerd's config (version 3). `restrict_oom_score_adj`: this machine is a
    container without CAP_SYS_RESOURCE, where runc fails every sandbox that asks for a
    lower oom_score_adj than its own ("can't get final child's PID from pipe: EOF")."""
    disabled = ", ".join(f"'{name}'" for name in DISABLED_PLUGINS)
    cri = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = '{node_dir / "containerd"}'
state = '/run/containerd'
disabled_plugins = [{disabled}]

[grpc]
  address = '{CONTAINERD_SOCKET}'

[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = '{node_dir / "image-verifiers"}'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{PAUSE}'

[{cri}]
  enable_cdi = true
  cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']
  restrict_oom_score_adj = true
  [{cri}.cni]
    bin_dirs = ['{CNI_BIN}']
    conf_dir = '{node_dir / "cni"}'
  [{cri}.containerd]
    default_runtime_name = 'runc'
    [{cri}.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = '{RUNC}'
        SystemdCgroup = false
"""


def cni_conflist(pod_cidr: str) -> str:
    """The node's pod network: a bridge (`cni0`) inside the node's namespace, addresses
    from `pod_cidr`, no masquerading (the node has no way out)."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": pod_cidr}]],
                        "dataDir": "/run/cni-ipam",
                    },
                },
                {"type": "loopback"},
            ],
        },
        indent=1,
    )


def kubelet_config(node_dir: Path, *, ip: str, cgroup_root: str, ca: Path) -> str:
    """The kubelet's KubeletConfiguration: cgroupfs under the node's own cgroup root,
    containerd's socket in the node's /run, logs under the node's directory, eviction
    thresholds low enough that a busy shared disk never taints the node."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "podLogsDir": str(node_dir / "pod-logs"),
        "resolvConf": "",
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "maxPods": 30,
        "syncFrequency": "10s",
        "fileCheckFrequency": "5s",
        "nodeStatusReportFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "registerNode": True,
    }
    return yaml.safe_dump(config)
